"""Independent simulations of a study, side by side in worker processes (``agentsched load --jobs``).

A load study is many simulations that share nothing: each policy's search for the rate it sustains,
each policy's streams at each load. Each is deterministic under its own seed, so running them in
separate processes changes the wall time only, never a figure (tests/experiments/test_jobs.py
compares the two). Why processes: the simulator is pure Python, and threads would share one
interpreter lock.

Workers start with ``spawn`` (a fresh interpreter: nothing a thread of this process holds is
copied into them) and ignore Ctrl-C: the parent stops them (``_stop``) and the command reports
the interrupt once. A worker that dies (a script without its ``__main__`` guard re-runs in each
worker and fails there) is a one-line error, never a wait. A call is a function of this package
and its arguments; nothing from outside the process is unpickled.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from agentsched.errors import AgentschedError

MAX_DEFAULT_JOBS = 16  # the default: one worker per core, up to this many
KILL_WAIT_S = 5.0  # how long a killed worker is waited for (SIGKILL ends it at once)

Call = tuple[Callable[..., Any], tuple[Any, ...]]  # (function, its arguments)


def default_jobs() -> int:
    """One worker per core (``os.cpu_count``), at most ``MAX_DEFAULT_JOBS``."""
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS))


def check_jobs(jobs: object) -> int:
    """``jobs`` if it is an integer >= 1, else a one-line ``AgentschedError``."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise AgentschedError(f"jobs must be an integer >= 1, got {jobs!r}")
    return jobs


def run_jobs(calls: Sequence[Call], jobs: int, done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """The result of each call, in the order of ``calls``, computed on up to ``jobs`` processes
    (in this one when ``jobs`` is 1 or there is one call); ``done(i, result)`` is told in this
    process as each call ends (in the order they end). A call that raises stops the others and
    its exception is raised here."""
    check_jobs(jobs)
    if jobs == 1 or len(calls) <= 1:
        out = []
        for i, (fn, args) in enumerate(calls):
            out.append(fn(*args))
            if done is not None:
                done(i, out[-1])
        return out
    results: list[Any] = [None] * len(calls)
    pool = ProcessPoolExecutor(
        min(jobs, len(calls)), mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_interrupt
    )
    try:
        futures = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(calls)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if done is not None:
                done(futures[future], results[futures[future]])
    except BrokenProcessPool:
        raise AgentschedError(
            f"the worker processes of jobs={jobs} ended before their work was done (a script "
            'that starts them needs `if __name__ == "__main__":`; or give jobs=1)'
        ) from None
    finally:
        _stop(pool)
    return results


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now, its running calls too. Why kill: after a failure or Ctrl-C a call may run
    for minutes more, and the interpreter's exit would wait for it. (Python before 3.14 has no
    public way to reach the workers; they are taken before ``shutdown``, which forgets them.)"""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:  # reaped here, so none is left behind when run_jobs returns
        process.join(KILL_WAIT_S)


def _ignore_interrupt() -> None:
    # why: Ctrl-C reaches every process of the terminal's group; a worker would print its own
    # traceback, while the parent stops the workers and reports the interrupt once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
