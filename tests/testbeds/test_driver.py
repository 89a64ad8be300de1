"""The driver over a tiny scripted backend: start rules, data flow, timeline and Execution
recording, failures, and the backend life cycle (begin, start/wait, abort, end)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from agentsched.errors import TestbedError
from agentsched.model.execution import Status
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow
from agentsched.model.workflow_io import parse_workflow
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure, MachineLost
from agentsched.testbeds.failures import is_external

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


class ScriptedBackend(Backend):
    """Each task takes ``duration_ms[task]`` (load ``start.load_ms`` first) on a virtual clock;
    its output is ``f"{task}({inputs})"``; ``fail[task]`` is the exception it raises at its end."""

    name = "scripted"

    def __init__(
        self,
        duration_ms: dict[str, float],
        *,
        fail: dict[str, BaseException] | None = None,
        early: Failure | None = None,
        broken_wait: bool = False,
    ) -> None:
        self.duration_ms = duration_ms
        self.fail = fail or {}
        self.early = early  # a Failure begin() returns
        self.broken_wait = broken_wait  # wait() raises (a backend bug)
        self.log: list[tuple[Any, ...]] = []
        self.now = 0.0
        self.running: dict[str, tuple[float, float, float]] = {}  # task -> (start, end, load)

    def begin(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None, expected: bool = False
    ) -> Failure | None:
        self.log.append(("begin", expected))
        self.now, self.running = 0.0, {}
        return self.early

    def now_ms(self) -> float:
        return self.now

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        self.log.append(("start", start.task, start.mode, dict(inputs or {})))
        self.running[start.task] = (self.now, self.now + start.load_ms + self.duration_ms[start.task], start.load_ms)
        self._inputs = getattr(self, "_inputs", {})
        self._inputs[start.task] = dict(inputs or {})

    def wait(self) -> list[Completion]:
        if self.broken_wait:
            raise RuntimeError("backend bug")
        self.now = min(end for _, end, _ in self.running.values())
        out = []
        for task in sorted(t for t, (_, end, _) in self.running.items() if end == self.now):
            start, end, load = self.running.pop(task)
            err = self.fail.get(task)
            inputs = ",".join(f"{k}={v}" for k, v in sorted(self._inputs[task].items()))
            out.append(Completion(task, start, end, load, None if err else f"{task}({inputs})", err))
        return out

    def abort(self, wait: bool = True) -> dict[str, float]:
        self.log.append(("abort", sorted(self.running)))
        loads = {t: load for t, (_, _, load) in self.running.items()}
        self.running = {}
        return loads

    def end(self) -> dict[str, Any]:
        self.log.append(("end",))
        return {"backend": "scripted"}


def wf(tasks: dict, edges=(), budget=None) -> Workflow:
    return parse_workflow(
        {
            "name": "t",
            "cards": "a5500",
            "decision_space": "three_way",
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        },
        "t",
    )


DIAMOND = wf(
    {"A": "minilm_l6", "B": "groupby", "C": "reranker", "D": "doc_merger"},
    [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
)


def test_data_flow_sources_get_the_inputs_successors_their_predecessors_outputs():
    be = ScriptedBackend({"A": 10, "B": 5, "C": 7, "D": 1})
    ex = Driver(be).run(DIAMOND, {t: C for t in "ABCD"}, inputs={"q": "hi"})
    starts = {e[1]: e[3] for e in be.log if e[0] == "start"}
    assert starts == {
        "A": {"q": "hi"},
        "B": {"A": "A(q=hi)"},
        "C": {"A": "A(q=hi)"},
        "D": {"B": "B(A=A(q=hi))", "C": "C(A=A(q=hi))"},
    }
    assert ex.ok and ex.outputs["D"] == "D(B=B(A=A(q=hi)),C=C(A=A(q=hi)))" and set(ex.outputs) == set("ABCD")


def test_timeline_and_execution_are_recorded_by_the_driver():
    be = ScriptedBackend({"A": 10, "B": 5, "C": 7, "D": 1})
    ex = Driver(be).run(DIAMOND, {"A": C, "B": C, "C": N, "D": C})
    spans = {s.task: (s.ready_ms, s.start_ms, s.end_ms) for s in ex.spans}
    assert spans == {"A": (0, 0, 10), "B": (10, 10, 15), "C": (10, 10, 17), "D": (17, 17, 18)}
    assert [s.task for s in ex.spans] == ["A", "B", "C", "D"]  # start order
    assert (ex.status, ex.e2e_ms, ex.elapsed_ms, ex.testbed) == (Status.OK, 18, 18, "scripted")
    reranker = DIAMOND.task_cards["C"].vram_needed_mb
    assert ex.peak_vram_mb == reranker and ex.vram_timeline == ((0.0, 0.0), (10.0, reranker), (17.0, 0.0))
    assert ex.extra == {"backend": "scripted"}
    assert [e[0] for e in be.log] == ["begin", "start", "start", "start", "start", "end"]


def test_queued_task_pays_the_load_the_dispatcher_gives():
    w = wf({"A": "clip", "B": "bert_base"})
    ex = Driver(ScriptedBackend({"A": 10, "B": 20})).run(w, {"A": Q, "B": Q})
    a, b = ex.span("A"), ex.span("B")
    assert (a.load_ms, a.start_ms, a.end_ms) == (w.task_cards["A"].load_ms, 0, w.task_cards["A"].load_ms + 10)
    assert b.start_ms == a.end_ms  # one queued task at a time


def test_a_task_that_raises_ends_the_run_as_error_and_aborts_the_rest():
    be = ScriptedBackend({"A": 10, "B": 5, "C": 7, "D": 1}, fail={"B": ZeroDivisionError("division by zero\nmore")})
    ex = Driver(be).run(DIAMOND, {t: C for t in "ABCD"})
    assert ex.status is Status.ERROR and ex.e2e_ms is None and ex.elapsed_ms == 15
    assert ex.message == "task B (groupby) failed: ZeroDivisionError: division by zero"
    assert ex.extra == {"backend": "scripted", "failed_task": "B"}
    assert ex.span("B").end_ms is None and ex.span("C").end_ms is None and ex.span("D") is None
    assert ("abort", ["C"]) in be.log and be.log[-1] == ("end",)
    assert set(ex.outputs) == {"A"}


def test_a_cuda_out_of_memory_is_oom():
    be = ScriptedBackend({"A": 10, "B": 5}, fail={"A": RuntimeError("CUDA out of memory. Tried to allocate")})
    ex = Driver(be).run(wf({"A": "clip", "B": "groupby"}), {"A": N, "B": C})
    assert ex.status is Status.OOM and ex.message.startswith("task A (clip): CUDA out of memory: RuntimeError")


def test_a_task_whose_machine_was_lost_fails_its_run_as_no_placements_doing():
    from agentsched.model.rounds import speaks

    be = ScriptedBackend({"A": 10, "B": 5}, fail={"A": MachineLost("LocalRayletDiedError: the raylet died")})
    ex = Driver(be).run(wf({"A": "clip", "B": "groupby"}), {"A": N, "B": C})
    assert (
        ex.status is Status.ERROR
        and ex.message == "task A (clip) lost its machine: LocalRayletDiedError: the raylet died"
    )
    assert ex.extra["failed_node"] == "machine" and ex.extra["external"] and ex.extra["lost_task"] == "A"
    assert not ex.placement_failed and not speaks(ex, [ex])  # a round of such runs has nothing to judge
    be = ScriptedBackend({"A": 10, "B": 5}, fail={"A": RuntimeError("the tool broke")})
    assert Driver(be).run(wf({"A": "clip", "B": "groupby"}), {"A": N, "B": C}).placement_failed  # (as before)


def test_an_infeasible_start_is_oom_with_the_loads_the_backend_reports():
    # clip 656 + bert_base 486 > 1100: B (gpu_now) cannot start while the queued A holds its VRAM
    w = wf({"A": "clip", "C": "groupby", "B": "bert_base"}, [("C", "B")], budget=1100)
    be = ScriptedBackend({"A": 10, "B": 20, "C": 1})
    ex = Driver(be).run(w, {"A": Q, "B": N, "C": C})
    assert ex.status is Status.OOM and ex.extra["failed_task"] == "B" and ex.elapsed_ms == 1
    assert ex.peak_vram_mb == pytest.approx(656 + 486)
    assert ex.span("A").end_ms is None and ex.span("A").load_ms == w.task_cards["A"].load_ms  # from abort()
    assert ("abort", ["A"]) in be.log


def test_a_failure_before_the_clock_starts():
    be = ScriptedBackend({"A": 1}, early=Failure(Status.ERROR, "A", "task A (groupby) failed to load: OSError"))
    ex = Driver(be).run(wf({"A": "groupby"}), {"A": C})
    assert (ex.status, ex.spans, ex.elapsed_ms, ex.message) == (
        Status.ERROR,
        (),
        0.0,
        "task A (groupby) failed to load: OSError",
    )
    assert ex.extra == {"backend": "scripted", "failed_task": "A"}
    assert [e[0] for e in be.log] == ["begin", "end"]


def test_a_backend_error_propagates_after_cleanup():
    be = ScriptedBackend({"A": 1}, broken_wait=True)
    with pytest.raises(RuntimeError, match="backend bug"):
        Driver(be).run(wf({"A": "groupby"}), {"A": C})
    assert [e[0] for e in be.log][-2:] == ["abort", "end"]


def test_expected_preflight_and_close_go_to_the_backend():
    class Checked(ScriptedBackend):
        def preflight(self, workflow: Workflow) -> None:
            raise TestbedError(f"cannot run {workflow.name}")

    d = Driver(Checked({"A": 1}))
    assert d.expected(wf({"A": "groupby"}), {"A": C}) is None  # the backend cannot give one
    with pytest.raises(TestbedError, match="cannot run t"):
        d.preflight(wf({"A": "groupby"}))
    assert d.deterministic is False and d.name == "scripted"
    d.close()


class APIConnectionError(Exception):
    """Named as the openai SDK's (its types need no import to be told apart)."""


class RateLimitError(APIConnectionError.__base__):  # type: ignore[misc]
    pass


class ReadTimeout(APIConnectionError):  # httpx's name: a timeout under a connection error's name
    pass


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        FileNotFoundError("prompt.txt"),
        APIConnectionError("down"),
        RateLimitError("429"),
    ],
)
def test_a_failure_of_something_outside_the_workflow_is_external(exc):
    assert is_external(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad"),
        RuntimeError("CUDA out of memory"),
        TimeoutError(),
        ReadTimeout("slow"),
        TypeError("can't convert cuda:0 device type tensor"),
    ],
)
def test_a_failure_a_placement_may_cause_is_not_external(exc):
    assert not is_external(exc)


def test_host_code_that_ended_before_any_placed_task_started_cannot_be_the_placements():
    from agentsched.testbeds.failures import host_failure_external

    bad = ValueError("bad prompt")
    assert host_failure_external(bad, (0.0, 1.0), [1.0, 2.0])  # it ended before both started: took no output
    assert not host_failure_external(bad, (0.0, 1.0), [0.5])  # a placed task ran beside it
    assert not host_failure_external(TimeoutError(), (0.0, 1.0), [2.0])  # a timeout: never called external
    assert not host_failure_external(RuntimeError("CUDA out of memory"), (0.0, 1.0), [])
    assert host_failure_external(ConnectionRefusedError(), (0.0, 1.0), [0.5])  # refused: whatever ran beside it
