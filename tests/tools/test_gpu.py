"""GPU code paths (marked `gpu`: skipped without CUDA). Small sizes, so they fit any GPU."""

from __future__ import annotations

import pytest

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode
from agentsched.model.workflow_io import parse_workflow
from agentsched.tools import get_tool, tool_names

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = [pytest.mark.tools, pytest.mark.gpu]


def _shape(out):
    if isinstance(out, dict):
        return {k: _shape(v) for k, v in out.items() if hasattr(v, "shape")}
    return tuple(out.shape) if hasattr(out, "shape") else type(out)


@pytest.mark.parametrize("name", tool_names())
def test_tool_on_gpu_matches_cpu_shapes(name):
    cpu = get_tool(name, "small")
    cpu.load("cpu")
    expect = _shape(cpu.call())
    cpu.unload()
    gpu = get_tool(name, "small")
    gpu.load("gpu")
    try:
        assert gpu.device == ("cuda" if gpu.has_gpu else "cpu")
        out = gpu.call()
        gpu.sync()
        assert _shape(out) == expect
    finally:
        gpu.unload()


def test_vector_search_on_gpu_finds_planted():
    t = get_tool("vector_search", "small")
    t.load("cuda")
    out = t.call()
    assert out["ids"][:, 0].cpu().tolist() == t.planted.tolist()
    t.unload()


def test_move_between_host_and_gpu():
    t = get_tool("clip", "small")
    t.load("cpu")
    t.move("cuda")
    assert t.device == "cuda" and next(t._m_model.parameters()).is_cuda
    t.call()
    t.move("cpu")
    assert not next(t._m_model.parameters()).is_cuda
    t.unload()


def test_profiler_measures_vram_and_load():
    from agentsched.profiler import profiler as prof

    run = prof.profile(["clip", "web_search"], "all", size="small", runs=3, warmup=1, busy="ignore")
    devices = [(m.tool, m.device) for m in run.measurements]
    assert devices == [("clip", "cpu"), ("clip", "cuda"), ("web_search", "cpu")]  # host-only: no GPU run
    cs = prof.build_card_set(run, "gpu")
    assert cs.cards["clip"].gpu_ms > 0 and cs.cards["clip"].vram_mb > 0 and cs.cards["clip"].load_ms > 0
    assert cs.cards["web_search"].gpu_ms is None
    assert cs.machine["gpu"]


def _wf(tasks, budget=None, edges=()):
    return parse_workflow(
        {
            "name": "g",
            "cards": "a5500",
            "decision_space": "three_way",
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        },
        "g",
    )


def test_local_gpu_now_and_queue():
    from agentsched.testbeds.local import LocalTestbed

    tb = LocalTestbed(size="small")
    try:
        w = _wf({"A": "clip", "B": "bert_base", "C": "groupby", "D": "web_search"})
        ex = tb.run(w, {"A": Mode.GPU_NOW, "B": Mode.GPU_QUEUE, "C": Mode.GPU_QUEUE, "D": Mode.CPU})
        assert ex.ok and ex.extra["gpu_now"] == "pooled" and ex.extra["measured_peak_vram_mb"] > 0
        b, c = ex.span("B"), ex.span("C")
        assert c.start_ms >= b.end_ms and b.load_ms > 0  # one queued task at a time, loaded first
        # under a budget the ceiling is set, then restored; clip and bert_base stayed resident (656 +
        # 486 MB fit in 1200): the queued task is admitted with its model loaded, a warm hit
        w2 = _wf({"A": "clip", "B": "bert_base"}, budget=1200)
        ex2 = tb.run(w2, {"A": Mode.GPU_NOW, "B": Mode.GPU_QUEUE})
        assert ex2.ok and ex2.extra["gpu_now"] == "pooled" and ex2.span("B").load_ms == 0
    finally:
        tb.close()


def test_real_cuda_oom_is_an_oom_execution():
    from agentsched.testbeds.local import LocalTestbed

    class Hog:
        """Allocates far more than the memory ceiling lets it."""

        has_gpu = True

        def __init__(self):
            self.device = None

        loaded = property(lambda self: self.device is not None)

        def load(self, device="cpu"):
            self.device = device

        def move(self, device):
            self.device = device

        def run(self, inputs):  # the public Tool API

            return self.call()

        def call(self):
            _, total = torch.cuda.mem_get_info()
            return torch.empty(int(total), dtype=torch.uint8, device="cuda")  # > budget ceiling

        def sync(self):
            torch.cuda.synchronize()

        def unload(self):
            self.device = None

    tb = LocalTestbed(size="small", tool_factory=lambda name, size, seed=0: Hog())
    w = _wf({"A": "groupby", "B": "audio_features"}, budget=200)
    ex = tb.run(w, {"A": Mode.GPU_NOW, "B": Mode.CPU})
    assert ex.status is Status.OOM and "out of memory" in ex.message and "\n" not in ex.message
    assert tb.run(w, {"A": Mode.CPU, "B": Mode.CPU}).ok  # the process carries on


def test_concurrent_local_runs_share_one_budget_on_a_real_gpu():
    """Two workflows at once on one CUDA device, under one budget: warm tools from the pool, the
    ledger never above the budget, the real allocated peak under the ceiling, no OOM."""
    from concurrent.futures import ThreadPoolExecutor

    from agentsched.testbeds.local import LocalTestbed
    from agentsched.testbeds.tool_pool import ToolPool

    pool = ToolPool(budget_mb=1200)
    tb = LocalTestbed(size="small", pool=pool)
    a = _wf({"A": "clip", "B": "groupby"}, budget=1200, edges=[("A", "B")])
    b = _wf({"A": "bert_base"}, budget=1200)
    jobs = [(a, {"A": Mode.GPU_NOW, "B": Mode.CPU}), (b, {"A": Mode.GPU_QUEUE})] * 4
    try:
        with ThreadPoolExecutor(4) as ex:
            runs = list(ex.map(lambda j: tb.run(*j), jobs))
        assert all(x.ok for x in runs), [x.message for x in runs if not x.ok]
        assert pool.peak_resident_vram_mb <= 1200
        assert torch.cuda.max_memory_allocated() / 2**20 <= 1200
        assert all(tb.run(*j).ok for j in jobs[:2])  # one after another: clip and bert_base fit together
        loads = pool.stats()["loads"]
        assert all(tb.run(*j).ok for j in jobs[:2]) and pool.stats()["loads"] == loads  # warm: no load
    finally:
        tb.close()
