"""Which runs of a round tell of its mapping (model/rounds.py: speaks, first_cause)."""

from __future__ import annotations

from agentsched.model.execution import Execution, Status
from agentsched.model.rounds import first_cause, speaks
from agentsched.model.workflow import Mode


def _run(status: Status, **extra: object) -> Execution:
    ok = status is Status.OK
    return Execution(
        status=status,
        mapping={"A": Mode.CPU},
        e2e_ms=10.0 if ok else None,
        elapsed_ms=10.0,
        peak_vram_mb=0.0,
        spans=(),
        message="" if ok else f"{status.value} {extra}",
        extra=extra,
    )


OK = _run(Status.OK)
RAISED = _run(Status.ERROR, failed_task="A")  # a placed task raised
OOM = _run(Status.OOM, failed_task="A")
HOST = _run(Status.ERROR, failed_node="llm")  # host code around the placed tasks raised


def test_a_run_that_ended_speaks():
    assert speaks(OK, (OK,))


def test_a_failure_in_host_code_never_speaks():
    assert not speaks(HOST, (HOST,)) and not speaks(HOST, (HOST, RAISED))


def test_an_oom_always_speaks():
    assert speaks(OOM, (OK, OK, OOM)) and speaks(OOM, (OOM,), ran_well_before=True)


def test_a_placed_task_that_raised_speaks_when_nothing_says_the_tools_run():
    assert speaks(RAISED, (RAISED,)) and speaks(RAISED, (RAISED, HOST))


def test_a_placed_task_that_raised_beside_as_many_runs_that_ended_is_a_bad_input():
    assert not speaks(RAISED, (OK, RAISED)) and not speaks(RAISED, (OK, RAISED, OK))


def test_most_runs_raising_is_not_a_bad_input():
    # 4 of 5 runs time out or raise: more likely the placement's than 4 bad requests
    assert speaks(RAISED, (RAISED, RAISED, OK, RAISED, RAISED))


def test_a_probe_that_raised_under_a_mapping_that_ran_well_before_is_a_bad_input():
    assert not speaks(RAISED, (RAISED,), ran_well_before=True)


def test_the_round_is_judged_by_its_first_run_that_speaks():
    assert first_cause((RAISED, OK, OOM)) is OOM  # the bad input is left out
    assert first_cause((HOST, RAISED)) is RAISED and first_cause((OK, RAISED)) is None and first_cause((HOST,)) is None
