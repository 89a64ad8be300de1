"""The local machine's live state (``LiveMachine``): what a decider sees of the tasks placed on it,
admission at the door, held tasks, VRAM that must fit, and what it learns from (``TaskDone``).
Driven directly through its placers, on a clock the test moves."""

from __future__ import annotations

import contextlib
import threading

import pytest

from agentsched.errors import TestbedError
from agentsched.model.live import FasterDevice, Invocation, MachineSnapshot, TaskDone
from agentsched.model.workflow import Mode
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.real import Cancelled
from tests.testbeds.test_driver import wf

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE
JOIN_S = 30  # bounds a thread's join (a hung test fails, never waits forever); not a timing check


class Clock:
    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s

    def move_ms(self, ms: float) -> None:
        self.s += ms / 1000.0


class Scripted(FasterDevice):
    """Places each task as ``modes`` says (by task id), admits while ``admitting``; keeps what it is told."""

    name = "scripted"
    late_binding = True

    def __init__(self, modes: dict[str, Mode | None]) -> None:
        self.modes = modes
        self.admitting = True
        self.asked: list[str] = []
        self.done: list[TaskDone] = []
        self.ended_ids: list[int] = []
        self.views: list[tuple[int, int, float, int]] = []  # (cpu_busy, cpu_waiting, vram, queue) at each place

    def admit(self, inv: Invocation, live: MachineSnapshot) -> bool:
        return self.admitting

    def place(self, inv: Invocation, task: str, live: MachineSnapshot) -> Mode | None:
        self.asked.append(task)
        self.views.append((live.cpu_busy, live.cpu_waiting, live.vram_in_use_mb, live.queue_length))
        return self.modes[task]

    def observe(self, done: TaskDone) -> None:
        self.done.append(done)

    def ended(self, inv: Invocation) -> None:
        self.ended_ids.append(inv.id)


TWO = wf({"A": "clip", "B": "bert_base"})  # two sources, both with GPU code
CHAIN = wf({"A": "clip", "B": "ocr"}, [("A", "B")])


def admitted(m: LiveMachine, *workflows):
    """A placer per workflow, each invocation admitted (in that order)."""
    placers = [m.placer(wf) for wf in workflows]
    for p in placers:
        p.admit()
    return placers


def machine(modes, *, budget=None, slots=1):
    clock = Clock()
    decider = Scripted(modes)
    return LiveMachine(decider, [TWO, CHAIN], vram_budget_mb=budget, cpu_slots=slots, clock=clock), decider, clock


def test_cpu_tasks_wait_for_a_slot_in_placement_order_until_their_run_starts():
    m, d, clock = machine({"A": C, "B": C}, slots=1)
    p = m.placer(TWO)
    p.admit()
    assert p.place("A") is C and p.place("B") is C
    assert (m.cpu_busy, len(m.cpu_fifo)) == (0, 2) and m.cpu_waiting_ms == sum(
        c.cpu_ms for c in TWO.task_cards.values()
    )
    p.run_started("A")
    clock.move_ms(40)
    assert (m.cpu_busy, [t for _, t, _ in m.cpu_fifo]) == (1, ["B"])
    m.under_lock(m.tick)
    (view,) = m.running_views(gpu=False)
    assert view.elapsed_ms == pytest.approx(40) and view.expected_remaining_ms == pytest.approx(
        TWO.task_cards["A"].cpu_ms - 40
    )
    p.finished("A", 40, 0)
    p.run_started("B")
    assert (m.cpu_busy, m.cpu_fifo) == (1, [])


def test_gpu_now_holds_its_vram_and_presses_from_its_placement_a_queued_task_loads_after_its_turn():
    m, d, clock = machine({"A": N, "B": Q})
    p = m.placer(TWO)
    p.admit()
    p.place("A")
    clip = TWO.task_cards["A"].vram_needed_mb
    assert m.vram_in_use_mb == clip
    (v,) = m.running_views(gpu=True)
    assert not v.loading  # placed: it presses from now (its warm instance starts within moments)
    p.place("B")  # queued: no VRAM while it waits
    assert m.vram_in_use_mb == clip and len(m.gpu_queue) == 1 and m.queue_backlog_ms > 0
    p.run_started("A")
    p.gate("B", threading.Event())  # its turn: the queue is idle and it fits
    assert m.vram_in_use_mb == clip + TWO.task_cards["B"].vram_needed_mb and m.gpu_queue == []
    assert [v.loading for v in m.running_views(gpu=True)] == [False, True]  # B loads its model
    p.run_started("B")
    assert [v.loading for v in m.running_views(gpu=True)] == [False, False]
    p.finished("A", 1, 0)
    p.finished("B", 1, 0)
    assert m.vram_in_use_mb == 0 and m.peak_vram_mb == clip + TWO.task_cards["B"].vram_needed_mb


def test_a_gpu_run_reports_how_long_each_other_unit_tool_ran_beside_it():
    m, d, clock = machine({"A": N, "B": N})
    one, two = admitted(m, TWO, CHAIN)
    one.place("A")
    one.run_started("A")  # clip from 0
    clock.move_ms(10)
    two.place("A")
    two.run_started("A")  # another clip from 10
    clock.move_ms(20)
    one.place("B")
    one.run_started("B")  # bert_base from 30
    clock.move_ms(50)
    one.finished("A", 80, 0)  # clip 0-80: clip 10-80 and bert_base 30-80 beside it
    done = d.done[-1]
    assert done.task == "A" and done.run_ms == 80 and done.invocation == 0
    assert done.overlap_ms == pytest.approx({"clip": 70.0, "bert_base": 50.0})
    clock.move_ms(10)
    two.finished("A", 80, 0)  # clip 10-90: clip 10-80, bert_base 30-90
    assert d.done[-1].overlap_ms == pytest.approx({"clip": 70.0, "bert_base": 60.0})
    assert two.inv.waiting_preds["B"] == 0 and two.inv.left == 1  # its successor is ready now


def test_the_gpu_queue_is_one_for_every_invocation_in_placement_order_one_at_a_time():
    m, d, clock = machine({"A": Q, "B": Q})
    one, two = admitted(m, TWO, TWO)
    two.place("A")
    one.place("A")  # placed second: waits behind two's
    turns: list[str] = []
    th = threading.Thread(target=lambda: (one.gate("A", threading.Event()), turns.append("one")))
    th.start()
    two.gate("A", threading.Event())
    turns.append("two")
    th.join(0.1)
    assert turns == ["two"] and m.queue_busy == (two.inv.id, "A")  # one at a time, across invocations
    two.run_started("A")
    two.finished("A", 1, 0)
    th.join(JOIN_S)
    assert turns == ["two", "one"] and m.queue_busy == (one.inv.id, "A")


def test_a_task_waiting_for_its_turn_stops_with_its_run():
    m, d, clock = machine({"A": Q, "B": Q})
    one, two = admitted(m, TWO, TWO)
    one.place("A")
    two.place("A")
    one.gate("A", threading.Event())
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        two.gate("A", stop)


def test_admission_goes_in_arrival_order_and_the_first_is_always_admitted():
    m, d, clock = machine({"A": C, "B": C})
    d.admitting = False
    first = m.placer(TWO)
    first.admit()  # nothing in flight: admitted whatever the decider says
    second = m.placer(TWO)
    admitted = threading.Event()
    th = threading.Thread(target=lambda: (second.admit(), admitted.set()))
    th.start()
    assert not admitted.wait(0.1)  # at the door while the decider says no
    assert m.snapshot().admission_waiting == 1 and m.in_flight == 1
    d.admitting = True
    th.join(JOIN_S)
    assert admitted.is_set() and m.in_flight == 2 and m.admission == []


def test_a_held_task_is_not_asked_again_until_the_machine_changes_and_takes_the_cpu_when_nothing_runs():
    m, d, clock = machine({"A": C, "B": None})
    p = m.placer(TWO)
    p.admit()
    p.place("A")
    assert p.place("B") is None and p.place("B") is None
    assert d.asked.count("B") == 1  # nothing started or ended: still held, the decider not asked
    p.run_started("A")
    assert p.place("B") is None and d.asked.count("B") == 2
    p.finished("A", 1, 0)
    assert p.place("B") is C  # nothing runs that could free anything: the CPU


def test_a_gpu_now_start_that_does_not_fit_waits_for_the_vram():
    clip, bert = TWO.task_cards["A"].vram_needed_mb, TWO.task_cards["B"].vram_needed_mb
    m, d, clock = machine({"A": N, "B": N}, budget=max(clip, bert) + 1)
    one, two = admitted(m, TWO, TWO)
    assert one.place("A") is N
    assert two.place("B") is None and m.vram_in_use_mb == clip  # held: never an oom
    one.run_started("A")
    one.finished("A", 1, 0)
    assert two.place("B") is N and m.vram_in_use_mb == bert


def test_a_held_tasks_wait_counts_from_when_it_was_first_asked():
    clip, bert = TWO.task_cards["A"].vram_needed_mb, TWO.task_cards["B"].vram_needed_mb
    m, d, clock = machine({"A": N, "B": N}, budget=max(clip, bert) + 1)
    one, two = admitted(m, TWO, TWO)
    one.place("A")
    one.run_started("A")
    assert two.place("B") is None  # ready now, held for the VRAM
    clock.move_ms(40)
    one.finished("A", 40, 0)
    assert two.place("B") is N
    clock.move_ms(5)
    two.run_started("B")
    clock.move_ms(10)
    two.finished("B", 10, 0)
    assert d.done[-1].task == "B" and d.done[-1].wait_ms == pytest.approx(40.0)  # the hold, as on the simulator


def test_the_end_releases_what_the_invocation_held_and_tells_the_decider():
    m, d, clock = machine({"A": N, "B": C})
    p = m.placer(TWO)
    p.admit()
    p.place("A")
    p.place("B")
    p.end()  # (a tool raised: its run ended early)
    assert (m.vram_in_use_mb, m.cpu_fifo, m.placed, m.in_flight) == (0.0, [], {}, 0)
    assert d.ended_ids == [p.inv.id] and p.inv.status == "error"


def test_a_closed_machine_refuses_and_wakes_who_waits_at_the_door():
    m, d, clock = machine({"A": C, "B": C})
    d.admitting = False
    first = m.placer(TWO)
    first.admit()
    second = m.placer(TWO)
    errors: list[BaseException] = []

    def wait_at_the_door():
        try:
            second.admit()
        except TestbedError as e:
            errors.append(e)

    th = threading.Thread(target=wait_at_the_door)
    th.start()
    m.close()
    th.join(JOIN_S)
    assert [str(e) for e in errors] == ["the live machine is closed"]
    with pytest.raises(TestbedError, match="closed"):
        first.place("A")


@pytest.mark.parametrize("slots", [0, -1, 1.5, True, None])
def test_cpu_slots_must_be_a_positive_integer(slots):
    with pytest.raises(TestbedError, match="cpu slots must be an integer >= 1"):
        LiveMachine(Scripted({}), [TWO], vram_budget_mb=None, cpu_slots=slots)


def test_a_decider_that_plans_whole_mappings_is_refused():
    with pytest.raises(TestbedError, match="does not place tasks when they become ready"):
        LiveMachine(FasterDevice(), [TWO], vram_budget_mb=None, cpu_slots=2)


def test_a_queued_task_whose_job_ended_without_a_turn_leaves_the_queue_to_the_next():
    m, d, clock = machine({"A": Q, "B": Q})
    one, two, three = admitted(m, TWO, TWO, TWO)
    for p in (one, two, three):
        p.place("A")
    one.gate("A", threading.Event())  # its turn
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        two.gate("A", stop)  # its run failed meanwhile
    two.released("A")  # (its job's return)
    assert [t for inv, t, _ in m.gpu_queue] == ["A"] and m.gpu_queue[0][0] is three.inv
    one.finished("A", 1, 0)
    three.gate("A", threading.Event())  # the next in line gets the turn, not a dead entry
    assert m.queue_busy == (three.inv.id, "A")


def test_withdraw_and_end_keep_a_task_whose_job_still_runs():
    m, d, clock = machine({"A": N, "B": C})
    (p,) = admitted(m, TWO)
    p.place("A")
    p.place("B")
    p.gate("A", threading.Event())  # A's job began (and runs on, abandoned)
    p.withdraw()  # the run failed: B never began, it goes at once
    assert list(m.placed) == [(p.inv.id, "A")] and m.cpu_fifo == []
    p.end()
    assert list(m.placed) == [(p.inv.id, "A")] and m.in_flight == 0 and m.vram_in_use_mb > 0
    p.released("A")  # the abandoned job returns
    assert (m.placed, m.vram_in_use_mb) == ({}, 0.0)


def test_a_pinned_mapping_is_placed_as_given_without_asking_the_decider():
    m, d, clock = machine({"A": C, "B": C})
    d.admitting = False
    first = m.placer(TWO)
    first.admit()
    pinned = m.placer(TWO, {"A": N, "B": Q})
    pinned.admit()  # not held at the door: the decider is not asked
    assert pinned.place("A") is N and pinned.place("B") is Q and d.asked == []


def test_a_task_withdrawn_before_its_job_began_is_cancelled_at_its_gate():
    m, d, clock = machine({"A": C, "B": C})
    (p,) = admitted(m, TWO)
    p.place("A")
    p.withdraw()  # its run failed before A's job reached its gate
    with pytest.raises(Cancelled):
        p.gate("A", threading.Event())  # it must not start off the machine's books


def test_a_pinned_gpu_now_waits_for_vram_others_hold_and_is_its_own_oom_when_it_never_fits():
    clip = TWO.task_cards["A"].vram_needed_mb
    m, d, clock = machine({"A": N, "B": N}, budget=clip - 1)  # clip never fits
    (alone,) = admitted(m, TWO)
    pinned = m.placer(TWO, {"A": N, "B": C})
    pinned.admit()
    assert pinned.place("A") is N  # nothing else holds VRAM: not moved to the CPU (its run is the oom)
    m2, _, _ = machine({"A": N, "B": N}, budget=clip + 1)
    (live,) = admitted(m2, TWO)
    live.place("A")  # holds clip's VRAM
    other = m2.placer(TWO, {"A": N, "B": C})
    other.admit()
    assert other.place("A") is None  # waits for the VRAM, as any gpu_now start


def test_a_pinned_invocation_does_not_wait_at_the_door_behind_one_the_decider_holds():
    m, d, clock = machine({"A": C, "B": C})
    d.admitting = False
    admitted(m, TWO)  # in flight: the next live one waits at the door
    held = m.placer(TWO)
    th = threading.Thread(target=lambda: _admit_quietly(held))
    th.start()
    assert until_true(lambda: m.admission == [held.inv])
    pinned = m.placer(TWO, {"A": C, "B": C})
    pinned.admit()  # at once
    assert m.in_flight == 2
    m.close()
    th.join(JOIN_S)


def _admit_quietly(p) -> None:
    with contextlib.suppress(TestbedError):
        p.admit()


def until_true(predicate, polls: int = 3000) -> bool:
    for _ in range(polls):
        if predicate():
            return True
        threading.Event().wait(0.005)
    return False


def test_a_queued_task_is_shown_from_its_turn_and_waits_until_its_turn():
    m, d, clock = machine({"A": Q, "B": C})
    (p,) = admitted(m, TWO)
    p.place("A")
    clock.move_ms(30)
    p.gate("A", threading.Event())  # its turn, 30 ms after its placement
    clock.move_ms(50)  # loading
    p.run_started("A")
    clock.move_ms(20)
    m.under_lock(m.tick)  # (the machine's clock moves at events; a decision would move it so)
    (v,) = m.running_views(gpu=True)
    assert v.elapsed_ms == pytest.approx(70.0)  # from its turn, its load included (as the simulator shows it)
    p.finished("A", 20, 50)
    assert d.done[-1].wait_ms == pytest.approx(30.0) and d.done[-1].load_ms == 50  # the load counted once
