"""Live placement on the local testbed: concurrent invocations of real (fake-GPU) tools, each task
placed by the load-aware planner when it becomes ready, over the process's ``LiveMachine``.

The fake GPU below slows a sensitive tool by what else runs on it (a contention law the test owns;
the planner never sees it): what the planner learns comes from the runs the local backend really
timed, and the overlaps the machine measured."""

from __future__ import annotations

import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentsched.errors import TestbedError
from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.workflow import Mode
from agentsched.planner.traffic import TrafficPlanner
from agentsched.planner.traffic_learn import ContentionLearner
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.local import LocalBackend, LocalTestbed
from agentsched.testbeds.tool_pool import ToolPool
from tests.testbeds.test_driver import wf

VRAM_MB = 1000.0
CARDS = CardSet(
    name="fake",
    source="test",
    cards={
        "clip": ToolCard(name="clip", cpu_ms=120.0, gpu_ms=20.0, load_ms=0.0, vram_mb=VRAM_MB, tags=("compute-bound",)),
        "ocr": ToolCard(name="ocr", cpu_ms=120.0, gpu_ms=20.0, load_ms=0.0, vram_mb=VRAM_MB, tags=("compute-bound",)),
    },
)
SENSITIVITY = {"clip": 0.0, "ocr": 3.0}  # the fake GPU's law: ocr runs 1 + 3 x (clips beside it) slower
STEP_S = 0.002


class FakeGpu:
    """Runs on the fake GPU: a tool's work advances at 1 / (1 + s x the other tools running)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: collections.Counter[str] = collections.Counter()
        self.vram_mb = self.peak_vram_mb = 0.0

    def run(self, name: str, card: ToolCard) -> None:
        with self.lock:
            self.running[name] += 1
            self.vram_mb += card.vram_needed_mb
            self.peak_vram_mb = max(self.peak_vram_mb, self.vram_mb)
        try:
            work = card.gpu_ms
            while work > 0:
                with self.lock:
                    others = sum(self.running.values()) - 1
                time.sleep(STEP_S)
                work -= STEP_S * 1000.0 / (1.0 + SENSITIVITY[name] * others)
        finally:
            with self.lock:
                self.running[name] -= 1
                self.vram_mb -= card.vram_needed_mb


class Tool:
    concurrent_safe = True
    has_gpu = True

    def __init__(self, name: str, gpu: FakeGpu, fail: bool) -> None:
        self.name, self.gpu, self.fail, self.device = name, gpu, fail, None

    def load(self, device: str = "cpu") -> None:
        self.device = device

    def unload(self) -> None:
        self.device = None

    def run(self, inputs):
        if self.fail:
            raise ValueError("broken tool")
        if self.device == "cuda":
            self.gpu.run(self.name, CARDS.cards[self.name])
        else:
            time.sleep(CARDS.cards[self.name].cpu_ms / 1000.0)
        return self.name

    def sync(self) -> None:
        pass


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)
    return FakeGpu()


def local_testbed(gpu: FakeGpu, fail: frozenset[str] = frozenset()) -> LocalTestbed:
    return LocalTestbed(
        tool_factory=lambda name, size, seed=0: Tool(name, gpu, name in fail), pool=ToolPool(), cpu_workers=4
    )


PAIR = wf({"A": "clip", "B": "ocr"}, budget=4 * VRAM_MB).with_cards(CARDS)  # two sources: they overlap


def run_many(tb: LocalTestbed, machine: LiveMachine, n: int, threads: int = 4):
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(lambda i: tb.run_live(PAIR, machine.placer(PAIR)), range(n)))


def test_concurrent_live_invocations_run_and_leave_the_machine_clean(fake_gpu):
    planner = TrafficPlanner()
    m = LiveMachine(planner, [PAIR], vram_budget_mb=2 * VRAM_MB, cpu_slots=2)
    tb = local_testbed(fake_gpu)
    runs = run_many(tb, m, 16)
    tb.close()
    assert all(x.ok for x in runs), [x.message for x in runs if not x.ok]
    assert all(set(x.mapping) == {"A", "B"} for x in runs)
    assert fake_gpu.peak_vram_mb <= 2 * VRAM_MB and m.peak_vram_mb <= 2 * VRAM_MB  # two fit at once, never three
    assert (m.in_flight, m.placed, m.vram_in_use_mb, m.cpu_fifo) == (0, {}, 0.0, [])
    gpu_runs = sum(x.mapping[t] is not Mode.CPU for x in runs for t in "AB")
    assert gpu_runs > 0 and planner.learner.runs > 0  # it learned from GPU runs that overlapped


def test_the_planner_learns_the_contention_the_machine_really_has(fake_gpu):
    planner = TrafficPlanner(admission=False)
    m = LiveMachine(planner, [PAIR], vram_budget_mb=None, cpu_slots=4)
    seen: list = []
    observe = planner.observe
    planner.observe = lambda done: (seen.append(done), observe(done))  # type: ignore[method-assign]
    tb = local_testbed(fake_gpu)
    run_many(tb, m, 24)
    tb.close()
    ocr_runs = [d for d in seen if d.card.name == "ocr" and d.mode is Mode.GPU_NOW and d.overlap_ms.get("clip")]
    assert ocr_runs  # the machine measured clip running beside ocr
    assert all(d.run_ms > CARDS.cards["ocr"].gpu_ms for d in ocr_runs)  # slowed by it, as timed for real
    prior_s = ContentionLearner().params(CARDS.cards["ocr"])[0]  # the same for both (the same tags)
    s_ocr, _ = planner.learner.params(CARDS.cards["ocr"])
    s_clip, _ = planner.learner.params(CARDS.cards["clip"])
    # only what ran tells them apart: ocr's sensitivity up from the prior (the fake GPU's is 3; measured
    # here 2.6-3.2), clip's down (the fake GPU's is 0; measured about 0.1)
    assert s_ocr > 2 * prior_s and s_clip < prior_s / 2


def test_a_tool_that_raises_fails_its_invocation_alone_and_releases_what_it_held(fake_gpu):
    planner = TrafficPlanner()
    m = LiveMachine(planner, [PAIR], vram_budget_mb=None, cpu_slots=2)
    tb = local_testbed(fake_gpu, fail=frozenset({"ocr"}))
    runs = run_many(tb, m, 6)
    tb.close()
    assert all(x.status.value == "error" and "ValueError: broken tool" in x.message for x in runs)
    assert (m.in_flight, m.placed, m.vram_in_use_mb) == (0, {}, 0.0)
    assert planner._held == {}  # nothing of a failed invocation is left waiting for the GPU
    assert planner.measured._pending == {}  # nor a prediction waiting for a run that never ends


def test_without_cuda_a_gpu_capable_workflow_is_refused_before_any_placement(monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: False)
    m = LiveMachine(TrafficPlanner(), [PAIR], vram_budget_mb=None, cpu_slots=2)
    tb = local_testbed(FakeGpu())
    with pytest.raises(TestbedError, match="has no CUDA GPU"):
        tb.run_live(PAIR, m.placer(PAIR))
    tb.close()
    assert (m.in_flight, m.placed) == (0, {})


# ---- a task's life on the machine's books: from its job, failures and timeouts included -------------
POLL_S = 0.005
POLLS = 4000  # bounded waits (polls), not timing checks


def until(predicate) -> bool:
    for _ in range(POLLS):
        if predicate():
            return True
        time.sleep(POLL_S)
    return False


class Scripted:
    """A tool that runs as told: ``raises`` at once, or blocks until ``release`` is set, or sleeps ``run_s``."""

    concurrent_safe = True
    has_gpu = True

    def __init__(
        self,
        raises: bool = False,
        release: threading.Event | None = None,
        run_s: float = 0.0,
        load_s: float = 0.0,
        after: threading.Event | None = None,
        started: threading.Event | None = None,
    ) -> None:
        self.raises, self.release, self.run_s, self.load_s = raises, release, run_s, load_s
        self.after, self.started = after, started  # wait for ``after`` first; set ``started`` when running

    def load(self, device: str = "cpu") -> None:
        time.sleep(self.load_s)

    def unload(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def run(self, inputs):
        if self.started is not None:
            self.started.set()
        if self.after is not None:
            assert self.after.wait(30)
        if self.raises:
            raise ValueError("broken tool")
        if self.release is not None:
            assert self.release.wait(30)
        time.sleep(self.run_s)
        return "done"


def scripted_testbed(tools: dict, *, slots: int = 4, timeout_s: float | None = None) -> LocalTestbed:
    pool = ToolPool()
    pool.set_cpu_slots(slots)
    return LocalTestbed(
        tool_factory=lambda name, size, seed=0: tools[name], pool=pool, cpu_workers=slots, task_timeout_s=timeout_s
    )


def test_a_failed_gpu_task_leaves_the_books_at_once_while_its_sibling_still_runs(fake_gpu):
    from tests.testbeds.test_live_machine import Scripted as Decider

    release, ocr_runs = threading.Event(), threading.Event()
    tb = scripted_testbed(
        {
            "clip": Scripted(raises=True, after=ocr_runs),  # raises once the ocr runs
            "ocr": Scripted(release=release, started=ocr_runs),
        }
    )
    m = LiveMachine(Decider({"A": Mode.GPU_NOW, "B": Mode.CPU}), [PAIR], vram_budget_mb=None, cpu_slots=4)
    out: list = []
    th = threading.Thread(target=lambda: out.append(tb.run_live(PAIR, m.placer(PAIR))))
    th.start()
    # the clip raised: it holds nothing and presses nobody, while the ocr of its invocation still runs
    assert until(lambda: m.cpu_busy == 1 and len(m.placed) == 1)
    assert m.vram_in_use_mb == 0.0 and m.running_views(gpu=True) == []
    release.set()
    th.join(30)
    tb.close()
    assert out[0].status.value == "error" and (m.placed, m.in_flight) == ({}, 0)


def test_waiting_for_a_cpu_slot_or_the_gpu_queue_does_not_count_toward_the_task_timeout(fake_gpu):
    from tests.testbeds.test_live_machine import Scripted as Decider

    # one CPU slot and one GPU queue: the third of three 0.3 s tasks waits 0.6 s, runs 0.3 s (< 0.5 s)
    for mode in (Mode.CPU, Mode.GPU_QUEUE):
        tb = scripted_testbed({"clip": Scripted(run_s=0.3)}, slots=1, timeout_s=0.5)
        one = wf({"A": "clip"}).with_cards(CARDS)
        m = LiveMachine(Decider({"A": mode}), [one], vram_budget_mb=None, cpu_slots=1)
        with ThreadPoolExecutor(3) as ex:
            runs = list(ex.map(lambda i: tb.run_live(one, m.placer(one)), range(3)))  # noqa: B023 - mapped within this iteration
        tb.close()
        assert [x.status.value for x in runs] == ["ok"] * 3, [x.message for x in runs]


def test_a_task_abandoned_over_its_timeout_keeps_its_place_until_it_really_returns(fake_gpu):
    from tests.testbeds.test_live_machine import Scripted as Decider

    release = threading.Event()
    tb = scripted_testbed({"clip": Scripted(release=release)}, timeout_s=0.2)
    one = wf({"A": "clip"}).with_cards(CARDS)
    m = LiveMachine(Decider({"A": Mode.GPU_QUEUE}), [one], vram_budget_mb=None, cpu_slots=2)
    x = tb.run_live(one, m.placer(one))
    assert x.status.value == "error" and "timeout" in x.message
    assert m.in_flight == 0 and m.queue_busy is not None  # the invocation is over; its run still holds the queue
    release.set()  # the abandoned call returns
    assert until(lambda: m.queue_busy is None and m.placed == {})
    tb.close()


def test_the_machine_id_names_the_gpu_or_its_absence(monkeypatch):
    from agentsched.testbeds import local

    monkeypatch.setattr(LocalBackend, "_real_cuda", staticmethod(lambda: False))
    assert local.machine_id() == f"local:no-cuda:{os.cpu_count() or 1} cpus"
    assert local.machine_id("cpu") == local.machine_id()


def test_a_live_cpu_task_s_load_counts_toward_its_timeout(fake_gpu):
    from tests.testbeds.test_live_machine import Scripted as Decider

    one = wf({"A": "clip"}).with_cards(CARDS)
    for mode in (Mode.CPU, Mode.GPU_QUEUE):  # a load that hangs is timed on either device
        tb = scripted_testbed({"clip": Scripted(load_s=1.0)}, timeout_s=0.3)
        m = LiveMachine(Decider({"A": mode}), [one], vram_budget_mb=None, cpu_slots=2)
        x = tb.run_live(one, m.placer(one))
        tb.close()
        assert x.status.value == "error" and "timeout" in x.message, (mode, x.message)
