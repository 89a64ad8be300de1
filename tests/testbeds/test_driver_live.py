"""Late binding in the driver (``Driver.run_live``) over the scripted backend: each task is placed
when it becomes ready, held tasks are asked again, and the placer hears every finish and the end."""

from __future__ import annotations

from typing import Any

import pytest

from agentsched.errors import TestbedError
from agentsched.model.execution import Status
from agentsched.model.rules import Dispatcher
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.driver import Completion, Driver, Failure, Placer
from tests.testbeds.test_driver import DIAMOND, ScriptedBackend, wf

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


class LateBackend(ScriptedBackend):
    """The scripted backend, able to begin with no mapping; ``wait_up_to`` moves its clock by the
    timeout (in ms x 1000) when nothing ends sooner."""

    late_binding = True

    def begin_live(self, workflow: Workflow, placer: Placer) -> Failure | None:
        self.log.append(("begin_live",))
        self.now, self.running = 0.0, {}
        self.placer = placer
        return None

    def start(self, start, inputs) -> None:
        super().start(start, inputs)
        self.placer.run_started(start.task)

    def wait(self) -> list[Completion]:
        done = super().wait()
        for c in done:  # (the task's own thread reports it on the local backend)
            if c.error is None:
                self.placer.finished(c.task, c.end_ms - c.start_ms - c.load_ms, c.load_ms)
            else:
                self.placer.released(c.task)
        return done

    def wait_up_to(self, timeout_s: float) -> list[Completion]:
        step_ms = timeout_s * 1000.0
        if not self.running or min(end for _, end, _ in self.running.values()) > self.now + step_ms:
            self.now += step_ms
            return []
        return self.wait()


class ScriptedPlacer(Placer):
    """Answers from ``modes`` (a list per task: one answer per question, None holds); logs every call."""

    def __init__(self, modes: dict[str, list[Mode | None]]) -> None:
        self.modes = {t: list(v) for t, v in modes.items()}
        self.log: list[tuple[Any, ...]] = []

    def admit(self) -> None:
        self.log.append(("admit",))

    def place(self, task: str) -> Mode | None:
        answers = self.modes[task]
        mode = answers.pop(0) if len(answers) > 1 else answers[0]
        self.log.append(("place", task, mode))
        return mode

    def run_started(self, task: str) -> None:
        self.log.append(("run_started", task))

    def finished(self, task: str, run_ms: float, load_ms: float) -> None:
        self.log.append(("finished", task, run_ms, load_ms))

    def released(self, task: str) -> None:
        self.log.append(("released", task))

    def withdraw(self) -> None:
        self.log.append(("withdraw",))

    def wait_change(self, timeout_s: float) -> None:
        self.log.append(("wait_change",))

    def end(self) -> None:
        self.log.append(("end",))


def test_each_task_is_placed_when_it_becomes_ready_and_the_mapping_is_what_was_decided():
    be = LateBackend({"A": 10, "B": 5, "C": 7, "D": 1})
    placer = ScriptedPlacer({"A": [N], "B": [C], "C": [Q], "D": [C]})
    ex = Driver(be).run_live(DIAMOND, placer, inputs={"q": 1})
    assert ex.ok and ex.mapping == {"A": N, "B": C, "C": Q, "D": C}
    assert list(ex.mapping) == ["A", "B", "C", "D"]  # workflow order, whatever the placement order
    asked = [e[1] for e in placer.log if e[0] == "place"]
    assert asked == ["A", "B", "C", "D"]  # B and C only after A ended, D after both
    assert placer.log[0] == ("admit",) and placer.log[-1] == ("end",)
    load_c = DIAMOND.task_cards["C"].load_needed_ms
    finished = {e[1]: e[2:] for e in placer.log if e[0] == "finished"}
    assert finished["A"] == (10, 0) and finished["C"] == (7, load_c)  # run, load
    assert ex.outputs["D"].startswith("D(")  # the data flow as without late binding


def test_a_held_task_is_asked_again_while_its_sibling_runs_then_starts():
    be = LateBackend({"A": 30, "B": 5})
    w = wf({"A": "clip", "B": "bert_base"})  # two sources
    placer = ScriptedPlacer({"A": [C], "B": [None, None, N]})
    ex = Driver(be).run_live(w, placer)
    assert ex.ok and ex.mapping == {"A": C, "B": N}
    assert [e[2] for e in placer.log if e[0] == "place" and e[1] == "B"] == [None, None, N]
    b = ex.span("B")
    assert b.ready_ms == 0 and b.start_ms == pytest.approx(10.0)  # two polls of 5 ms held it


def test_a_held_task_with_nothing_of_its_run_running_waits_for_the_machine_to_change():
    be = LateBackend({"A": 3})
    placer = ScriptedPlacer({"A": [None, None, C]})
    ex = Driver(be).run_live(wf({"A": "clip"}), placer)
    assert ex.ok and ex.mapping == {"A": C}
    assert [e[0] for e in placer.log].count("wait_change") == 2


def test_a_host_only_tool_placed_on_the_gpu_runs_on_the_cpu_and_the_decision_is_kept():
    be = LateBackend({"A": 4})
    ex = Driver(be).run_live(wf({"A": "pdf_parser"}), ScriptedPlacer({"A": [N]}))
    started = [e for e in be.log if e[0] == "start"]
    assert started[0][2] is C and ex.mapping == {"A": N}  # runs as cpu; the decision recorded


def test_the_placer_hears_the_end_after_a_failure_and_the_unplaced_tasks_are_not_in_the_mapping():
    be = LateBackend({"A": 10, "B": 5, "C": 7, "D": 1}, fail={"B": ValueError("bad")})
    placer = ScriptedPlacer({"A": [C], "B": [C], "C": [C], "D": [C]})
    ex = Driver(be).run_live(DIAMOND, placer)
    assert ex.status is Status.ERROR and ex.message == "task B (groupby) failed: ValueError: bad"
    assert set(ex.mapping) == {"A", "B", "C"} and placer.log[-1] == ("end",)
    assert ("released", "B") in placer.log and not any(e[0] == "finished" and e[1] == "B" for e in placer.log)
    assert placer.log.index(("withdraw",)) < placer.log.index(("end",))  # at the failure, before the abort


def test_a_placer_that_raises_still_hears_the_end():
    class Closed(ScriptedPlacer):
        def place(self, task: str) -> Mode | None:
            raise TestbedError("the live machine is closed")

    placer = Closed({})
    with pytest.raises(TestbedError, match="closed"):
        Driver(LateBackend({"A": 1})).run_live(wf({"A": "clip"}), placer)
    assert placer.log[-1] == ("end",)


def test_a_backend_without_late_binding_is_a_one_line_error():
    with pytest.raises(TestbedError, match="cannot place tasks when they become ready"):
        Driver(ScriptedBackend({"A": 1})).run_live(wf({"A": "clip"}), ScriptedPlacer({"A": [C]}))


# ---- the rules' late binding (Dispatcher.late) ------------------------------------------------------
def test_late_dispatcher_starts_nothing_until_bound():
    w = wf({"A": "clip", "B": "pdf_parser"}, [("A", "B")])
    d = Dispatcher.late(w)
    assert d.unbound == ["A"] and d.poll() == []
    assert d.bind("A", N) is N and [s.task for s in d.poll()] == ["A"]
    assert d.finish("A") == ["B"] and d.unbound == ["B"] and not d.finished
    assert d.bind("B", Q) is C  # a host-only tool on a GPU mode: cpu, no queue, no VRAM
    (st,) = d.poll()
    assert (st.mode, st.vram_mb, st.load_ms) == (C, 0.0, 0.0)
    d.finish("B")
    assert d.finished


def test_late_dispatcher_queues_a_gpu_queue_binding_with_its_load():
    w = wf({"A": "clip"})
    d = Dispatcher.late(w)
    d.bind("A", Q)
    (st,) = d.poll()
    assert st.mode is Q and st.load_ms == w.task_cards["A"].load_needed_ms


def test_binding_a_task_that_is_not_ready_is_refused():
    d = Dispatcher.late(wf({"A": "clip", "B": "groupby"}, [("A", "B")]))
    with pytest.raises(RuntimeError, match="not ready and unbound"):
        d.bind("B", C)


def test_the_machine_budget_applies_not_the_workflow_s():
    # clip 656 + bert_base 486 > the workflow's own 1100 MB: with its mapping that is an oom; placed
    # live, the placer's machine (a larger GPU shared by many workflows) holds the budget
    w = wf({"A": "clip", "B": "bert_base"}, budget=1100)
    assert Driver(ScriptedBackend({"A": 5, "B": 5})).run(w, {"A": N, "B": N}).status is Status.OOM
    placer = ScriptedPlacer({"A": [N], "B": [N]})
    placer.vram_budget_mb = 8192.0
    ex = Driver(LateBackend({"A": 5, "B": 5})).run_live(w, placer)
    assert ex.ok and ex.peak_vram_mb == pytest.approx(656 + 486)
    small = ScriptedPlacer({"A": [N], "B": [N]})
    small.vram_budget_mb = 1000.0  # the machine's own budget is enforced (a placer that erred: an oom)
    assert Driver(LateBackend({"A": 5, "B": 5})).run_live(w, small).status is Status.OOM
