"""Concurrent invoke(): a round's invocations run at once, results come back in order, ainvoke works."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentsched.errors import AgentschedError
from agentsched.runtime import Runtime
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import TestbedSpec

ROUND = 4
WAIT_S = 30  # bounds the wait for the others; the check is on how many ran at once, not on time


class _Overlap(Testbed):
    """The simulator, where each run waits (bounded) until ROUND runs are in progress at once."""

    concurrent_runs = True
    name = "sim"

    def __init__(self) -> None:
        self.inner = TestbedSpec(kind="sim").build()
        self.lock = threading.Lock()
        self.cond = threading.Condition()
        self.active = 0
        self.max_active = 0

    def run(self, workflow, mapping, *, rng=None, inputs=None):
        with self.lock:
            x = self.inner.run(workflow, mapping, rng=rng, inputs=inputs)
        with self.cond:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.active >= ROUND, timeout=WAIT_S)
        with self.cond:
            self.active -= 1
        return x

    def close(self) -> None:
        self.inner.close()


def test_a_rounds_invocations_run_at_once_and_are_recorded_in_order(tmp_path):
    tb = _Overlap()
    with Runtime("S1", store=tmp_path / "r.db", testbed=tb, round_size=ROUND, explore_fraction=0.0) as rt:
        results = []
        threads = [threading.Thread(target=lambda: results.append(rt.invoke())) for _ in range(2 * ROUND)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(results) == 2 * ROUND and all(r.ok for r in results)
        assert tb.max_active == ROUND  # a whole round at once, never more than a round
        assert sorted(r.invocation_id for r in results) == list(range(1, 2 * ROUND + 1))
        rows = rt.store.executions(rt.learner_id)
        assert [r.seq for r in rows] == list(range(2 * ROUND))
        by_round = {r.round: r.mapping for r in rows}
        assert all(r.mapping == by_round[r.round] for r in rows)  # one mapping per round

        async def many():
            return await asyncio.gather(*(rt.ainvoke() for _ in range(ROUND)))

        assert all(r.ok for r in asyncio.run(many()))
        assert rt.executions == 3 * ROUND
    tb.close()


def test_pinned_invocations_stay_outside_the_learners_sequence(tmp_path):
    with Runtime("S1", store=tmp_path / "p.db", testbed="sim", round_size=2) as rt:
        rt.invoke()
        pin = {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"}
        rt.pin(pin)
        res = rt.invoke()
        assert res.kind == "pinned" and {t: m.value for t, m in res.mapping.items()} == pin
        rt.unpin()
        assert rt.invoke().kind in ("round", "probe")
        rows = rt.store.executions(rt.learner_id)
        assert [(r.kind == "pinned", r.seq is None) for r in rows] == [(False, False), (True, True), (False, False)]


def test_a_round_whose_next_place_another_process_recorded_still_serves_its_open_slots(tmp_path):
    """Two processes on one store: this one opens a round (its first run live) and then finds the
    round's next place already recorded by the other. The round's open slot must still be served as
    that round's run: before, it stayed open, and the next invocation ran in it under the old round's
    mapping while the loop counted it as the next round's (or, when the policy probed, waited
    forever for an invocation that never came)."""
    from agentsched.store.store import Store

    def runtime(db):  # ucb1: the mapping changes from round to round
        return Runtime("S1", policy="ucb1", store=db, testbed=TestbedSpec(kind="sim"), round_size=2, seed=3)

    with runtime(tmp_path / "dry.db") as dry:  # what the other process recorded: round 0's mapping, run
        dry.invoke()
        theirs = dry.store.execution_at(dry.learner_id, 0)
    db = tmp_path / "s.db"
    with runtime(db) as rt:
        other = Store(db)
        try:  # the other process records place 1 (round 0's second run) before this one gets there
            assert other.append(rt.learner_id, 1, "round", 0, theirs)[1]
        finally:
            other.close()
        got: list = []
        th = threading.Thread(target=lambda: got.extend(rt.invoke() for _ in range(6)), daemon=True)
        th.start()
        th.join(WAIT_S)
        assert not th.is_alive(), "an invocation waited forever for an open slot"
        rounds = {r.round: r.mapping for r in rt.store.rounds(rt.learner_id)}
    assert len(got) == 6 and all(r.ok and r.invocation_id is not None for r in got)
    assert [r.round for r in got] == [0, 0, 1, 1, 2, 2]
    for r in got:  # every invocation ran its round's mapping
        if r.round in rounds:
            assert {t: m.value for t, m in r.mapping.items()} == rounds[r.round], r.round


class _Held(Testbed):
    """The simulator, where each run waits (bounded) until the test lets it end."""

    concurrent_runs = True
    name = "sim"

    def __init__(self) -> None:
        self.inner = TestbedSpec(kind="sim").build()
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, workflow, mapping, *, rng=None, inputs=None):
        with self.lock:
            x = self.inner.run(workflow, mapping, rng=rng, inputs=inputs)
        self.started.set()
        self.release.wait(WAIT_S)
        return x

    def close(self) -> None:
        self.inner.close()


def _close_during_a_run(tmp_path, pinned: bool, wait_s: float | None):
    """Invoke once in a thread, close the runtime while that run is in progress, then let it end.
    Returns (what the invocation gave: a result or the exception, the rows in the store)."""
    from agentsched.store.store import Store

    tb = _Held()
    db = tmp_path / "c.db"
    rt = Runtime("S1", store=db, testbed=tb, round_size=2, explore_fraction=0.0)
    if pinned:
        rt.pin({"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"})
    learner, got = rt.learner_id, []

    def call():
        try:
            got.append(rt.invoke())
        except Exception as e:  # noqa: BLE001 - what the caller saw is the check
            got.append(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert tb.started.wait(WAIT_S)
    closer = threading.Thread(target=rt.close if wait_s is None else lambda: rt.close(wait_s=wait_s), daemon=True)
    closer.start()
    closer.join(0.3 if wait_s is None else WAIT_S)
    assert closer.is_alive() is (wait_s is None)  # a graceful close waits for the run in progress
    tb.release.set()
    caller.join(WAIT_S)
    closer.join(WAIT_S)
    assert not caller.is_alive() and not closer.is_alive()
    store = Store(db)
    try:
        rows = store.executions(learner)
    finally:
        store.close()
    tb.close()
    return got[0], rows


def test_close_lets_a_pinned_run_in_progress_end_and_keeps_its_record(tmp_path):
    """Before, the store closed under a pinned run still running: its record was lost."""
    res, rows = _close_during_a_run(tmp_path, pinned=True, wait_s=None)
    assert not isinstance(res, Exception) and res.ok and res.kind == "pinned"
    assert [(r.kind, r.id) for r in rows] == [("pinned", res.invocation_id)]


def test_close_lets_a_rounds_run_in_progress_end_and_keeps_its_record(tmp_path):
    """Before, close failed a round's run in progress with "runtime is closed" and never recorded it."""
    res, rows = _close_during_a_run(tmp_path, pinned=False, wait_s=None)
    assert not isinstance(res, Exception) and res.ok and res.kind == "round"
    assert [(r.kind, r.seq, r.id) for r in rows] == [("round", 0, res.invocation_id)]


@pytest.mark.parametrize("pinned", [False, True])
def test_close_without_a_wait_fails_the_run_in_progress_and_says_so(tmp_path, caplog, pinned):
    """The service's cut (it records such runs itself: a pinned run recorded again when it ended was
    kept twice): close(wait_s=0) does not wait, and a run ending after it is not recorded."""
    with caplog.at_level("WARNING", logger="agentsched.runtime"):
        res, rows = _close_during_a_run(tmp_path, pinned=pinned, wait_s=0.0)
    assert isinstance(res, Exception) and "runtime is closed" in str(res) and rows == []
    assert any("1 invocation(s) still running" in r.getMessage() for r in caplog.records)


def test_an_invocation_after_close_began_is_refused_at_once(tmp_path):
    tb = _Held()
    rt = Runtime("S1", store=tmp_path / "r.db", testbed=tb, round_size=2, explore_fraction=0.0)
    caller = threading.Thread(target=rt.invoke, daemon=True)
    caller.start()
    assert tb.started.wait(WAIT_S)
    closer = threading.Thread(target=rt.close, daemon=True)
    closer.start()
    closer.join(0.3)
    try:
        with pytest.raises(AgentschedError, match="runtime is closed"):
            rt.invoke()
    finally:
        tb.release.set()
        caller.join(WAIT_S)
        closer.join(WAIT_S)
        tb.close()


class _Broken(Testbed):
    """A testbed with a bug: its run raises (not a failed tool, which is a failed Execution)."""

    concurrent_runs = True
    name = "sim"

    def run(self, workflow, mapping, *, rng=None, inputs=None):
        raise RuntimeError("testbed bug")


def test_a_run_that_raises_stops_the_runtime_and_its_caller_is_told(tmp_path):
    """Before, the loop stopped without answering it: the caller waited forever (and close for it)."""
    rt = Runtime("S1", store=tmp_path / "b.db", testbed=_Broken(), round_size=2, explore_fraction=0.0)
    got: list = []

    def call():
        try:
            rt.invoke()
        except Exception as e:  # noqa: BLE001 - what the caller saw is the check
            got.append(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(WAIT_S)
    try:
        assert not caller.is_alive(), "the caller of a run that raised was never answered"
        assert len(got) == 1 and str(got[0]) == "runtime stopped: RuntimeError: testbed bug"
    finally:
        rt.close(wait_s=1.0)


def test_each_waiting_caller_gets_its_own_copy_of_the_error_that_stopped_them():
    """Before, every caller raised one shared instance: its traceback grew by each thread's frames."""
    import traceback

    from agentsched.runtime.dispatch import Dispatcher

    d = Dispatcher()
    got: list = []

    def call():
        try:
            d.submit({}, lambda mapping, inputs: None)
        except AgentschedError as e:
            got.append(e)

    callers = [threading.Thread(target=call) for _ in range(3)]
    for t in callers:
        t.start()
    while d.in_flight < 3:
        threading.Event().wait(0.01)
    stop = AgentschedError("runtime is closed")
    d.stop(stop)
    for t in callers:
        t.join(WAIT_S)
    assert len(got) == 3 and len({id(e) for e in got} | {id(stop)}) == 4
    assert all(str(e) == "runtime is closed" for e in got)
    depths = {len(traceback.extract_tb(e.__traceback__)) for e in got}
    assert len(depths) == 1  # one caller's frames each, not the others' piled on


def test_a_ctrl_c_leaving_a_runtime_waits_for_no_tool_its_loop_thread_is_in(tmp_path, monkeypatch):
    """A what-if probe runs its tools on the runtime's loop thread: a Ctrl-C in the caller cannot
    stop it there. Before, leaving the ``with`` block then waited up to 60 s + 60 s for that tool."""
    import agentsched.runtime.runtime as runtime_mod

    stuck, release = threading.Event(), threading.Event()

    def loop_in_a_tool(*args, **kwargs):
        stuck.set()
        release.wait(WAIT_S)  # a probe's tool that does not stop

    monkeypatch.setattr(runtime_mod, "run_loop", loop_in_a_tool)
    rt = Runtime("S1", store=tmp_path / "k.db", testbed="sim", round_size=2)
    try:
        assert stuck.wait(WAIT_S)
        leaving = threading.Thread(target=rt.__exit__, args=(KeyboardInterrupt, KeyboardInterrupt(), None), daemon=True)
        leaving.start()
        leaving.join(10)  # (the loop thread is waited for a second, not a minute)
        assert not leaving.is_alive() and not release.is_set()
        with pytest.raises(AgentschedError, match="runtime is closed"):
            rt.invoke()
    finally:
        release.set()


def test_a_ctrl_c_in_the_first_live_run_after_a_replay_is_not_called_a_bad_history(tmp_path):
    """Before, it was taken for a history this runtime cannot replay: the error advised --forget."""
    db = tmp_path / "h.db"
    with Runtime("S1", store=db, testbed="sim", round_size=1) as rt:
        rt.invoke()
        rt.invoke()

    class Interrupted(Testbed):
        name = "sim"

        def __init__(self) -> None:
            self.inner = TestbedSpec(kind="sim").build()

        def run(self, workflow, mapping, *, rng=None, inputs=None):
            raise KeyboardInterrupt

    rt = Runtime("S1", store=db, testbed=Interrupted(), round_size=1)
    try:
        got: list = []
        caller = threading.Thread(target=lambda: got.append(_call(rt.invoke)), daemon=True)
        caller.start()
        caller.join(WAIT_S)
        assert rt.replayed == 2 and isinstance(got[0], KeyboardInterrupt)
        with pytest.raises(AgentschedError) as e:
            rt.invoke()
        assert "forget" not in str(e.value) and "runtime stopped" in str(e.value)
    finally:
        rt.close()


def _call(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - what the caller got is the check
        return e
