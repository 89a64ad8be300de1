"""The start rules under LangGraph's own scheduling (gate.Gate)."""

import threading

import pytest

pytest.importorskip("langgraph")  # the package's __init__ needs it, even for the gate alone

from agentsched.integrations.langgraph.gate import Aborted, Gate, Infeasible  # noqa: E402
from agentsched.model.workflow import Mode  # noqa: E402

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


def _enter_in_thread(gate: Gate, task: str, log: list) -> threading.Thread:
    def go() -> None:
        try:
            gate.enter(task)
            log.append(("in", task))
        except (Aborted, Infeasible) as e:
            log.append((type(e).__name__, task))

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


def test_gpu_now_over_the_budget_is_infeasible() -> None:
    gate = Gate({"a": N, "b": N}, {"a": 600, "b": 500}, budget_mb=1000, cpu_slots=None)
    gate.enter("a")
    with pytest.raises(Infeasible) as e:
        gate.enter("b")
    assert str(e.value) == "gpu_now task b needs 500 MB with 600 MB held: 1100 > budget 1000 MB"
    gate.leave("a")
    gate.enter("b")  # fits once a left
    assert gate.peak_vram_mb == 600


def test_gpu_queue_runs_one_at_a_time_in_arrival_order() -> None:
    gate = Gate({"a": Q, "b": Q, "c": Q}, {"a": 10, "b": 10, "c": 10}, budget_mb=None, cpu_slots=None)
    log: list = []
    gate.enter("a")
    tb = _enter_in_thread(gate, "b", log)
    tb.join(0.2)
    tc = _enter_in_thread(gate, "c", log)
    tc.join(0.2)
    assert log == []  # both wait while a runs
    gate.leave("a")
    tb.join(5)
    tc.join(0.2)
    assert log == [("in", "b")]  # b first (it arrived first); c still waits
    gate.leave("b")
    tc.join(5)
    assert log == [("in", "b"), ("in", "c")]


def test_gpu_queue_head_waits_for_vram_and_is_infeasible_above_the_budget() -> None:
    gate = Gate({"a": N, "q": Q, "big": Q}, {"a": 700, "q": 500, "big": 1200}, budget_mb=1000, cpu_slots=None)
    with pytest.raises(Infeasible, match="gpu_queue task big needs 1200 MB, more than the whole budget 1000 MB"):
        gate.enter("big")
    log: list = []
    gate.enter("a")
    tq = _enter_in_thread(gate, "q", log)
    tq.join(0.2)
    assert log == []  # 700 + 500 > 1000: waits (no VRAM held while waiting)
    gate.leave("a")
    tq.join(5)
    assert log == [("in", "q")]


def test_cpu_slots_cap_and_abort_releases_waiters() -> None:
    gate = Gate({"a": C, "b": C}, {}, budget_mb=None, cpu_slots=1)
    log: list = []
    gate.enter("a")
    tb = _enter_in_thread(gate, "b", log)
    tb.join(0.2)
    assert log == []
    gate.abort()
    tb.join(5)
    assert log == [("Aborted", "b")]


def test_a_queued_node_too_big_for_the_budget_fails_alone_when_it_reaches_the_head() -> None:
    """The Dispatcher's rule, by arrival: the queue head larger than the whole budget is refused when
    it comes up; the refusal fails that node only, and the queue moves on to the next."""
    gate = Gate({"a": Q, "big": Q, "c": Q}, {"a": 100, "big": 1200, "c": 100}, budget_mb=1000, cpu_slots=None)
    log: list = []
    gate.enter("a")
    t_big = _enter_in_thread(gate, "big", log)
    t_big.join(0.2)
    tc = _enter_in_thread(gate, "c", log)
    tc.join(0.2)
    assert log == []  # both wait behind a
    gate.leave("a")
    t_big.join(5)
    tc.join(5)
    assert sorted(log) == [("Infeasible", "big"), ("in", "c")]  # (both woken at once: either logs first)
    assert gate.vram_in_use_mb == 100 and gate.peak_vram_mb == 100
