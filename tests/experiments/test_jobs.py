"""experiments/jobs.py: a study's simulations side by side in processes, the same figures as one by one."""

from __future__ import annotations

import multiprocessing
import operator
import os
import signal
import time
from collections.abc import Callable

import pytest

from agentsched.errors import AgentschedError, WorkflowError
from agentsched.experiments.jobs import MAX_DEFAULT_JOBS, check_jobs, default_jobs, run_jobs
from agentsched.experiments.traffic import Machine, oracle_mappings, sustainable_rates
from agentsched.scenarios import resolve_workflow

CALLS = [(operator.mul, (3, 4)), (pow, (2, 10)), (os.getpid, ()), (operator.add, ("a", "b"))]


@pytest.mark.parametrize("jobs", [1, 3])
def test_the_results_come_in_the_order_of_the_calls_and_each_is_told_once(jobs):
    told: dict[int, object] = {}
    got = run_jobs(CALLS, jobs, lambda i, result: told.setdefault(i, result))
    assert got[:2] == [12, 1024] and got[3] == "ab"
    assert told == dict(enumerate(got))
    # jobs 1 computes here; more compute in worker processes
    assert (got[2] == os.getpid()) == (jobs == 1)


def test_a_call_that_raises_raises_its_own_error_here():
    calls = [(operator.mul, (2, 2)), (check_jobs, (0,))]
    with pytest.raises(AgentschedError, match=r"^jobs must be an integer >= 1, got 0$"):
        run_jobs(calls, 2)


def test_a_worker_s_one_line_error_keeps_its_type():
    calls = [(resolve_workflow, ("S1",)), (resolve_workflow, ("S99",))]
    with pytest.raises(WorkflowError, match="S99"):
        run_jobs(calls, 2)


def test_a_worker_that_dies_is_a_one_line_error_not_a_wait():
    """(A script without its __main__ guard re-runs in each spawned worker and dies there: before, with
    multiprocessing.Pool, new workers were started for ever.)"""
    with pytest.raises(AgentschedError, match=r"^the worker processes of jobs=2 ended before their work was done"):
        run_jobs([(operator.add, (1, 2)), (os._exit, (3,))], 2)


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs, asked of the OS. Why not ``Process.is_alive``: a test before may
    have started Ray in this process, whose driver ignores SIGCHLD; the kernel then reaps children
    itself, and multiprocessing reports a dead worker alive for ever (a CI failure of this test)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask with signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _workers_started_by(call: Callable[[], object]) -> list[int]:
    before = set(multiprocessing.active_children())  # (other tests' pools are not this call's)
    call()
    return [c.pid for c in set(multiprocessing.active_children()) - before if c.pid is not None]


def test_a_failure_stops_the_calls_still_running():
    """A call that would run for minutes is stopped, not waited for (nor left running)."""

    def fail() -> None:
        with pytest.raises(AgentschedError, match="got 0"):
            run_jobs([(time.sleep, (120,)), (check_jobs, (0,))], 2)

    # (run_jobs kills and reaps its workers before it returns: none runs when it has)
    assert not [pid for pid in _workers_started_by(fail) if _running(pid)]


def test_the_workers_are_gone_when_the_calls_succeed():
    got: list[object] = []
    pids = _workers_started_by(lambda: got.extend(run_jobs([(operator.mul, (i, 2)) for i in range(6)], 2)))
    assert got == [0, 2, 4, 6, 8, 10] and not [pid for pid in pids if _running(pid)]


def test_dead_workers_count_as_gone_where_sigchld_is_ignored():
    """(Ray's driver ignores SIGCHLD: multiprocessing then reports every dead child alive.)"""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        test_a_failure_stops_the_calls_still_running()
    finally:
        signal.signal(signal.SIGCHLD, previous)


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2", None])
def test_an_invalid_jobs_is_a_one_line_error(jobs):
    with pytest.raises(AgentschedError, match=r"^jobs must be an integer >= 1, got "):
        run_jobs(CALLS, jobs)  # type: ignore[arg-type]


def test_the_default_is_one_per_core_within_bounds():
    assert 1 <= default_jobs() <= MAX_DEFAULT_JOBS
    assert default_jobs() == min(os.cpu_count() or 1, MAX_DEFAULT_JOBS)


def test_rates_searched_side_by_side_are_the_rates_searched_one_by_one():
    wfs = [resolve_workflow("S2"), resolve_workflow("S5")]
    machine = Machine(vram_budget_mb=4096.0, cpu_slots=4, noise_sigma=0.0)
    oracle = oracle_mappings(wfs, None)
    names = ("dmda", "least-loaded+adm", "traffic-aware")
    told: list[str] = []
    apart = sustainable_rates(wfs, names, machine, oracle, 10.0, 0.0, jobs=3, done=lambda n, r: told.append(n))
    assert apart == sustainable_rates(wfs, names, machine, oracle, 10.0, 0.0, jobs=1)
    assert sorted(told) == sorted(names) and all(r > 0 for r in apart.values())
