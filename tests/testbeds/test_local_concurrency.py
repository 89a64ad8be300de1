"""Concurrent runs on the local testbed: tools from the process's pool, one VRAM budget for all of
them. Fake tools on a fake GPU (no torch needed); the tools themselves record what was resident
and running at once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentsched.model.workflow import Mode
from agentsched.model.workflow_io import parse_workflow
from agentsched.testbeds.local import LocalBackend, LocalTestbed
from agentsched.testbeds.tool_pool import ToolPool

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


def wf(name: str, tasks: dict, edges=(), budget=None):
    return parse_workflow(
        {
            "name": name,
            "cards": "a5500",
            "decision_space": "three_way",
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        },
        name,
    )


class Gpu:
    """What the fake tools hold on the fake GPU: resident (loaded) and running, with the peaks."""

    def __init__(self, vram_mb: dict[str, float]) -> None:
        self.vram_mb = vram_mb  # tool -> its card's VRAM
        self.lock = threading.Lock()
        self.resident = self.running = self.peak_resident = self.peak_running = 0.0

    def add(self, what: str, mb: float) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + mb)
            peak = f"peak_{what}"
            setattr(self, peak, max(getattr(self, peak), getattr(self, what)))


class Tool:
    concurrent_safe = False

    def __init__(self, name: str, gpu: Gpu, made: list, gate: threading.Barrier | None) -> None:
        self.name, self.gpu, self.gate, self.device, self.has_gpu = name, gpu, gate, None, True
        made.append(self)

    @property
    def mb(self) -> float:
        return self.gpu.vram_mb[self.name] if self.device == "cuda" else 0.0

    def load(self, device: str = "cpu") -> None:
        self.device = device
        self.gpu.add("resident", self.mb)

    def unload(self) -> None:
        self.gpu.add("resident", -self.mb)
        self.device = None

    def run(self, inputs):
        self.gpu.add("running", self.mb)
        try:
            if self.gate is not None:
                self.gate.wait(timeout=10)  # every concurrent run is inside run() at once
            else:
                threading.Event().wait(0.005)
            return self.name
        finally:
            self.gpu.add("running", -self.mb)

    def sync(self) -> None:
        pass


class Factory:
    def __init__(self, gpu: Gpu, gate: threading.Barrier | None = None, safe: bool = False) -> None:
        self.gpu, self.gate, self.safe, self.made = gpu, gate, safe, []

    def __call__(self, name, size, seed=0):
        t = Tool(name, self.gpu, self.made, self.gate)
        t.concurrent_safe = self.safe
        return t


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)


def concurrently(n: int, fn):
    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(lambda i: fn(i), range(n)))


@pytest.mark.parametrize("safe", [False, True])
def test_two_concurrent_runs_get_two_instances_unless_the_tool_is_concurrent_safe(safe):
    gpu, gate = Gpu({}), threading.Barrier(2)
    f = Factory(gpu, gate, safe=safe)
    tb = LocalTestbed(tool_factory=f, pool=ToolPool())
    w = wf("one", {"A": "groupby"})
    runs = concurrently(2, lambda i: tb.run(w, {"A": C}))
    assert all(x.ok for x in runs)  # both were inside run() at once (the barrier let them through)
    assert len(f.made) == (1 if safe else 2)
    again = concurrently(2, lambda i: tb.run(w, {"A": C}))
    assert all(x.ok for x in again) and len(f.made) == (1 if safe else 2)  # warm: no new instance
    tb.close()


def test_concurrent_runs_of_two_workflows_never_exceed_the_budget_together(fake_gpu):
    # clip 656 + bert_base 486 = 1142 > 1100: each workflow fits alone, never both at once
    a, b = wf("a", {"A": "clip", "B": "groupby"}, [("A", "B")], 1100), wf("b", {"A": "bert_base"}, budget=1100)
    vram = {"clip": a.task_cards["A"].vram_needed_mb, "bert_base": b.task_cards["A"].vram_needed_mb}
    gpu = Gpu(vram)
    f = Factory(gpu)
    tb = LocalTestbed(tool_factory=f, pool=ToolPool(), cpu_workers=2)
    jobs = [(a, {"A": N, "B": C}), (b, {"A": N}), (a, {"A": Q, "B": C}), (b, {"A": Q})] * 4
    runs = concurrently(8, lambda i: tb.run(*jobs[i % len(jobs)]))
    assert all(x.ok for x in runs), [x.message for x in runs if not x.ok]
    assert gpu.peak_resident <= 1100 and gpu.peak_running <= 1100  # recorded by the tools themselves
    assert tb.backend.pool.peak_resident_vram_mb <= 1100
    tb.close()
    assert gpu.resident == 0  # the last testbed closed: every instance unloaded


def test_a_runtime_serves_a_rounds_invocations_concurrently_with_warm_tools(fake_gpu, tmp_path):
    from agentsched.runtime import Runtime

    w = wf("r", {"A": "clip"})
    gpu, gate = Gpu({"clip": w.task_cards["A"].vram_needed_mb}), threading.Barrier(2)
    f = Factory(gpu, gate)
    tb = LocalTestbed(tool_factory=f, pool=ToolPool())
    with Runtime(w, policy="all-gpu", store=None, testbed=tb, round_size=4) as rt:
        first = concurrently(2, lambda i: rt.invoke())  # both inside run() at once: two instances
        again = concurrently(2, lambda i: rt.invoke())
    assert all(r.ok for r in first + again) and len(f.made) == 2
    assert {r.mapping["A"] for r in first + again} == {Mode.GPU_NOW}
    tb.close()


def test_overlapping_runs_restore_torch_threads_once_the_last_one_ends():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    gate = threading.Barrier(2)
    seen: list[int] = []

    class Probe(Tool):
        def run(self, inputs):
            seen.append(torch.get_num_threads())
            return super().run(inputs)

    def factory(name, size, seed=0):
        return Probe(name, Gpu({}), [], gate)

    tb = LocalTestbed(tool_factory=factory, pool=ToolPool(), torch_threads=1)
    runs = concurrently(2, lambda i: tb.run(wf("t", {"A": "groupby"}), {"A": C}))
    assert all(x.ok for x in runs) and seen == [1, 1]
    assert torch.get_num_threads() == before
    tb.close()


def test_a_run_under_a_budget_first_evicts_what_runs_without_one_left_resident(fake_gpu):
    free = wf("free", {"A": "clip", "B": "bert_base"})  # no budget: both stay resident (1142 MB)
    tight = wf("tight", {"A": "clip"}, budget=1000)
    gpu = Gpu({"clip": free.task_cards["A"].vram_needed_mb, "bert_base": free.task_cards["B"].vram_needed_mb})
    tb = LocalTestbed(tool_factory=Factory(gpu), pool=ToolPool())
    assert tb.run(free, {"A": N, "B": N}).ok and gpu.resident == 1142
    x = tb.run(tight, {"A": N})
    assert x.ok and gpu.resident <= 1000 and tb.backend.pool.resident_vram_mb <= 1000
    tb.close()


def test_a_gpu_task_larger_than_the_process_budget_is_an_oom_execution(fake_gpu):
    w = wf("big", {"A": "clip", "B": "groupby"})  # the workflow has no budget; the process has 500 MB
    gpu = Gpu({"clip": w.task_cards["A"].vram_needed_mb})
    tb = LocalTestbed(tool_factory=Factory(gpu), pool=ToolPool(budget_mb=500))
    x = tb.run(w, {"A": N, "B": C})
    assert x.status.value == "oom" and x.extra["failed_task"] == "A"
    assert x.message == "task A (clip): out of memory: clip needs 656 MB of VRAM, more than the whole budget of 500 MB"
    assert gpu.resident == 0 and tb.run(w, {"A": C, "B": C}).ok  # nothing loaded on the GPU; it carries on
    tb.close()


class Counting(Tool):
    """Counts the CPU tasks of every run inside ``run`` at once (the peak)."""

    inside = peak = 0
    lock = threading.Lock()

    def run(self, inputs):
        with Counting.lock:
            Counting.inside += 1
            Counting.peak = max(Counting.peak, Counting.inside)
        try:
            threading.Event().wait(0.02)
            return self.name
        finally:
            with Counting.lock:
                Counting.inside -= 1


@pytest.mark.parametrize("slots, most", [(None, 4), (1, 1), (2, 2)])
def test_the_process_cpu_slots_bound_the_cpu_tasks_of_every_run_together(slots, most):
    """Four runs of two parallel CPU tasks each, every run with its own two workers: without the
    process's CPU slots up to 8 tasks run at once (at least 4 seen here); with them, never more."""
    Counting.inside = Counting.peak = 0
    pool = ToolPool()
    pool.set_cpu_slots(slots)
    tb = LocalTestbed(
        tool_factory=lambda name, size, seed=0: Counting(name, Gpu({}), [], None), pool=pool, cpu_workers=2
    )
    w = wf("two", {"A": "groupby", "B": "image_resize"})
    gate = threading.Barrier(4)
    runs = concurrently(4, lambda i: (gate.wait(10), tb.run(w, {"A": C, "B": C}))[1])
    assert all(x.ok for x in runs), [x.message for x in runs]
    assert Counting.peak >= most if slots is None else Counting.peak == most
    assert pool.cpu_busy == 0
    tb.close()


def test_bad_cpu_slots_are_refused():
    with pytest.raises(ValueError, match="cpu slots must be an integer >= 1"):
        ToolPool().set_cpu_slots(0)
