"""Concurrent invoke(): a round's invocations run at once, results come back in order, ainvoke works."""

from __future__ import annotations

import asyncio
import threading

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
