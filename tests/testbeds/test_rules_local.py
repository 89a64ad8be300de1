"""The shared start rules (rules.Dispatcher) on hand-built cases, and the local testbed driving
them with fake tools. No torch needed: these run anywhere, GPU modes included (fake GPU)."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from agentsched.errors import TestbedError
from agentsched.model.execution import Status
from agentsched.model.rules import Dispatcher, Infeasible
from agentsched.model.workflow import Mode
from agentsched.model.workflow_io import parse_workflow
from agentsched.testbeds.local import LocalBackend, LocalTestbed
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.tool_pool import ToolPool

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


def wf(tasks: dict, edges=(), budget=None, space="three_way"):
    return parse_workflow(
        {
            "name": "t",
            "cards": "a5500",
            "decision_space": space,
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        },
        "t",
    )


DIAMOND = {
    "tasks": {"A": "minilm_l6", "B": "doc_merger", "C": "groupby", "D": "reranker"},
    "edges": [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
}


def started(decision) -> list[str]:
    assert not isinstance(decision, Infeasible), decision
    return [s.task for s in decision]


# ---- the Dispatcher on hand-built cases ------------------------------------------------------
def test_diamond_readiness_order():
    w = wf(**DIAMOND)
    d = Dispatcher(w, {"A": C, "B": C, "C": C, "D": C})
    assert started(d.poll()) == ["A"]
    assert started(d.poll()) == []  # nothing new until A finishes
    assert d.finish("A") == ["B", "C"]
    assert started(d.poll()) == ["B", "C"]
    assert d.finish("B") == []  # D still waits for C
    assert started(d.poll()) == []
    assert d.finish("C") == ["D"]
    assert started(d.poll()) == ["D"]
    d.finish("D")
    assert d.finished


def test_cpu_slots_cap_concurrency():
    w = wf({"A": "groupby", "B": "groupby", "C": "groupby"})
    d = Dispatcher(w, {"A": C, "B": C, "C": C}, cpu_slots=2)
    assert started(d.poll()) == ["A", "B"]
    d.finish("B")
    assert started(d.poll()) == ["C"]


def test_gpu_now_over_budget_is_infeasible():
    # clip 656 + bert_base 486 = 1142 > 1100
    w = wf({"A": "clip", "B": "bert_base"}, budget=1100)
    res = Dispatcher(w, {"A": N, "B": N}).poll()
    assert isinstance(res, Infeasible) and res.task == "B" and res.needed_mb == pytest.approx(1142)


def test_queue_is_fifo_one_at_a_time_and_waits_for_vram():
    w = wf({"A": "clip", "B": "bert_base", "C": "whisper_base", "D": "groupby"}, budget=1100)
    d = Dispatcher(w, {"A": N, "B": Q, "C": Q, "D": Q})
    first = d.poll()
    assert started(first) == ["A"]  # B (486) does not fit beside A (656) in 1100: it waits, unloaded
    assert d.queue_busy is None and list(d.queue) == ["B", "C", "D"]
    d.finish("A")
    nxt = d.poll()
    assert started(nxt) == ["B"] and nxt[0].load_ms == pytest.approx(481) and nxt[0].vram_mb == 486
    assert started(d.poll()) == []  # C waits for B: one queued task at a time
    d.finish("B")
    assert started(d.poll()) == ["C"]


def test_queue_head_larger_than_budget_is_infeasible():
    w = wf({"A": "llama_3b", "B": "groupby"}, budget=1100)
    res = Dispatcher(w, {"A": Q, "B": C}).poll()
    assert isinstance(res, Infeasible) and res.task == "A" and "whole budget" in res.message


# ---- the local testbed drives the same rules (fake tools, fake GPU) ----------------------------
class FakeTool:
    """Duck-typed Tool: sleeps instead of computing and logs what the testbed asked of it."""

    def __init__(self, name: str, log: list, *, call_s=0.02, load_s=0.01, fail=None, has_gpu=True):
        self.name, self.log, self.call_s, self.load_s, self.fail = name, log, call_s, load_s, fail
        self.has_gpu = has_gpu
        self.device = None
        self.calls = 0

    @property
    def loaded(self) -> bool:
        return self.device is not None

    def load(self, device: str = "cpu") -> None:
        if self.device != device:
            time.sleep(self.load_s)
            self.log.append(("load", self.name, device))
            self.device = device

    def move(self, device: str) -> None:
        self.log.append(("move", self.name, device))
        self.device = device

    def run(self, inputs):  # the public Tool API

        return self.call()

    def call(self):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        time.sleep(self.call_s)
        return self.calls

    def sync(self) -> None:
        pass

    def unload(self) -> None:
        self.log.append(("unload", self.name, self.device))
        self.device = None


class FakeFactory:
    def __init__(self, **per_tool):
        self.per_tool = per_tool  # tool -> FakeTool kwargs
        self.log: list = []
        self.made: list[FakeTool] = []
        self.lock = threading.Lock()

    def __call__(self, name, size, seed=0):
        t = FakeTool(name, self.log, **self.per_tool.get(name, {}))
        with self.lock:
            self.made.append(t)
        return t


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)


def local(factory, **kw) -> LocalTestbed:
    """A local testbed on a pool of its own (the process's shared pool would carry residents over)."""
    return LocalTestbed(size="small", tool_factory=factory, pool=ToolPool(), **kw)


def test_local_diamond_respects_dependencies():
    f = FakeFactory()
    ex = local(f, cpu_workers=2).run(wf(**DIAMOND), {"A": C, "B": C, "C": C, "D": C})
    assert ex.ok and ex.testbed == "local"
    s = {sp.task: sp for sp in ex.spans}
    assert s["B"].start_ms >= s["A"].end_ms and s["C"].start_ms >= s["A"].end_ms
    assert s["D"].ready_ms == pytest.approx(max(s["B"].end_ms, s["C"].end_ms))
    assert s["D"].start_ms >= s["D"].ready_ms
    assert ex.e2e_ms == pytest.approx(s["D"].end_ms)
    assert ex.peak_vram_mb == 0


def test_local_cpu_workers_cap():
    f = FakeFactory()
    ex = local(f, cpu_workers=1).run(
        wf({"A": "groupby", "B": "pdf_parser", "C": "log_analyzer"}), {"A": C, "B": C, "C": C}
    )
    spans = sorted(ex.spans, key=lambda s: s.start_ms)
    for a, b in itertools.pairwise(spans):
        assert b.start_ms >= a.end_ms  # one CPU task at a time


def test_local_amplification_calls_k_times():
    f = FakeFactory()
    w = wf({"A": {"tool": "groupby_x3", "repeat": 2}})
    ex = local(f).run(w, {"A": C})
    assert ex.ok and ex.spans[0].tool == "groupby_x6"
    assert sum(t.calls for t in f.made) == 6


def test_local_queue_loads_at_admission_and_serializes(fake_gpu):
    f = FakeFactory()
    w = wf({"A": "clip", "B": "bert_base", "C": "whisper_base"})
    tb = local(f)
    ex = tb.run(w, {"A": Q, "B": Q, "C": Q})
    assert ex.ok
    spans = [ex.span(t) for t in "ABC"]
    for a, b in itertools.pairwise(spans):
        assert b.start_ms >= a.end_ms  # FIFO, one at a time, in file order
    assert all(s.load_ms > 0 for s in spans)
    loads = [e for e in f.log if e[0] == "load"]
    assert [e[1] for e in loads] == ["clip", "bert_base", "whisper_base"]  # loaded when admitted
    assert all(e[2] == "cuda" for e in loads)
    assert not any(e[0] == "unload" for e in f.log)  # kept warm in the pool
    again = tb.run(w, {"A": Q, "B": Q, "C": Q})  # admitted with its model resident: a warm hit, no load
    assert again.ok and all(again.span(t).load_ms == 0 for t in "ABC") and again.extra["tool_hits"] == 3
    assert len([e for e in f.log if e[0] == "load"]) == 3


def test_local_gpu_now_loaded_before_the_clock_when_it_fits(fake_gpu):
    f = FakeFactory()
    w = wf({"A": "clip", "B": "groupby"}, budget=1100)
    tb = local(f)
    ex = tb.run(w, {"A": N, "B": C})
    assert ex.ok and ex.extra["gpu_now"] == "pooled"
    assert f.log[0] == ("load", "clip", "cuda") and not any(e[0] == "move" for e in f.log)
    assert ex.span("A").load_ms == 0  # loaded before the clock: the span pays none
    assert ex.span("A").vram_mb == 656 and ex.peak_vram_mb == 656
    assert set(ex.extra["tool_loads"]) == {"A", "B"}
    again = tb.run(w, {"A": N, "B": C})
    assert again.ok and again.extra["tool_hits"] == 2 and again.extra["tool_loads"] == {}


def test_local_gpu_now_cold_start_pays_its_load_in_the_span(fake_gpu):
    # A's clip (656) fills the budget resident; B's bert_base (486) cannot be loaded before the
    # clock (nothing is evicted for it), so B loads when it starts, after A, evicting idle clip
    f = FakeFactory()
    w = wf({"A": "clip", "B": "bert_base"}, edges=[("A", "B")], budget=1100)
    ex = local(f).run(w, {"A": N, "B": N})
    assert ex.ok and ex.span("A").load_ms == 0 and ex.span("B").load_ms > 0
    assert f.log.index(("unload", "clip", "cuda")) < f.log.index(("load", "bert_base", "cuda"))
    assert set(ex.extra["tool_evictions_ms"]) == {"B"}  # clip unloaded to make room for B


def test_local_and_sim_agree_on_feasibility(fake_gpu):
    """Same rules: for every mapping, the local testbed is oom exactly when the simulator is."""
    w = wf({"A": "clip", "B": "bert_base", "C": "whisper_base"}, budget=1200)
    sim = SimTestbed(noise_sigma=0.0)
    tb = local(FakeFactory(**{n: {"call_s": 0.002, "load_s": 0.001} for n in ("clip", "bert_base", "whisper_base")}))
    for combo in itertools.product((C, N, Q), repeat=3):
        m = dict(zip("ABC", combo, strict=True))
        assert tb.run(w, m).status == sim.run(w, m).status, m


def test_local_budget_oom_record(fake_gpu):
    w = wf({"A": "clip", "B": "bert_base"}, budget=1100)
    ex = local(FakeFactory()).run(w, {"A": N, "B": N})
    assert ex.status is Status.OOM and ex.e2e_ms is None
    assert "budget" in ex.message and "\n" not in ex.message
    assert ex.extra["failed_task"] == "B" and ex.peak_vram_mb == pytest.approx(1142)


def test_real_cuda_oom_becomes_oom_execution(fake_gpu):
    f = FakeFactory(
        clip={"fail": RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")}, groupby={"call_s": 0.05}
    )
    w = wf({"A": "clip", "B": "groupby", "C": "reranker"}, edges=[("A", "C")])
    tb = local(f)
    ex = tb.run(w, {"A": N, "B": C, "C": C})
    assert ex.status is Status.OOM and ex.extra["failed_task"] == "A"
    assert "out of memory" in ex.message and "\n" not in ex.message
    assert ex.span("C") is None  # never started
    # the testbed keeps working
    ok = local(FakeFactory()).run(w, {"A": C, "B": C, "C": C})
    assert ok.ok


def test_tool_error_becomes_error_execution():
    f = FakeFactory(groupby={"fail": ValueError("bad input\nsecond line")})
    ex = local(f).run(wf({"A": "groupby", "B": "pdf_parser"}), {"A": C, "B": C})
    assert ex.status is Status.ERROR and ex.e2e_ms is None
    assert ex.message == "task A (groupby) failed: ValueError: bad input"


def test_gpu_mapping_without_cuda_is_a_one_line_error():
    tb = LocalTestbed(size="small", device="cpu", tool_factory=FakeFactory())
    with pytest.raises(TestbedError) as e:
        tb.run(wf(**DIAMOND), {"A": C, "B": N, "C": C, "D": C})
    msg = str(e.value)
    assert "\n" not in msg and "no CUDA GPU" in msg and "--testbed sim" in msg and "task B" in msg
    assert tb.run(wf(**DIAMOND), {"A": C, "B": C, "C": C, "D": C}).ok  # all-CPU mappings still run


def test_tools_stay_loaded_across_workflows_until_the_last_testbed_closes():
    f = FakeFactory()
    tb = local(f)
    tb.run(wf({"A": "llama_1b"}), {"A": C})
    tb.run(wf({"A": "llama_3b", "B": "llama_1b"}), {"A": C, "B": C})
    assert [e for e in f.log if e[0] == "load"] == [("load", "llama_1b", "cpu"), ("load", "llama_3b", "cpu")]
    tb.close()
    assert all(not t.loaded for t in f.made)


def test_a_tool_that_cannot_load_is_an_error_execution():
    class Broken(FakeTool):
        def load(self, device="cpu"):
            raise OSError("weights missing")

    tb = LocalTestbed(size="small", tool_factory=lambda name, size, seed=0: Broken(name, []))
    ex = tb.run(wf({"A": "groupby"}), dict(A=C))
    assert ex.status is Status.ERROR and ex.message == "task A (groupby) failed to load: OSError: weights missing"


def test_host_only_tool_on_a_gpu_mode_runs_on_the_cpu_without_cuda():
    # log_analyzer has no GPU implementation: a gpu placement is a CPU task, so no CUDA is needed
    f = FakeFactory(log_analyzer={"has_gpu": False})
    tb = LocalTestbed(size="small", device="cpu", tool_factory=f)
    ex = tb.run(wf({"A": "log_analyzer", "B": "groupby"}, [("A", "B")]), {"A": N, "B": C})
    assert ex.ok and ex.span("A").mode is N and ex.span("A").vram_mb == 0
