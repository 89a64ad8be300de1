"""The live planner's learned contention, kept in the store: a restarted server resumes it.

``serve --placement live`` places every task with the load-aware planner (``planner/load.py``),
which learns each unit tool's contention (s, p) from the GPU runs it watches
(``planner/load_learn.py``). Without this module that learning lived in the process and a restart
began again from the tag priors. Here it is kept in the store's ``contention`` table, one row per
unit tool and card it was learned with (``digest`` of the card as profiled): a tool re-profiled on a
changed machine has a new card, so its unit starts from its prior again, while the other units keep
theirs.

When: loaded once, when the service starts (``LoadPlanner(learned=...)``); saved every ``SAVE_EVERY_RUNS`` learned runs (by the
thread of the invocation that crossed the mark) and when the service closes. Two servers sharing
a store each save what they learned; the later save of a unit wins (no merge). A row the learner
cannot take (a damaged store) is skipped with a warning (that unit starts from its prior); a store
that fails to save is a warning too: serving goes on, the learning stays in the process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from agentsched.errors import AgentschedError
from agentsched.model.cards import split_amplified
from agentsched.model.workflow import Workflow
from agentsched.planner.load import LoadPlanner
from agentsched.planner.load_learn import ContentionLearner
from agentsched.service.realtime import SharedMachine
from agentsched.store.records import digest
from agentsched.store.store import Store

SAVE_EVERY_RUNS = 200  # learned GPU runs between saves (a few seconds of a busy stream; one short write)
log = logging.getLogger("agentsched.service")


def unit_cards(workflows: Sequence[Workflow]) -> dict[str, list[str]]:
    """unit tool -> the digests of the served cards of that unit (``clip`` and ``clip_x12`` share one)."""
    out: dict[str, set[str]] = {}
    for wf in workflows:
        for card in wf.task_cards.values():
            out.setdefault(split_amplified(card.name)[0], set()).add(digest(card.model_dump(mode="json")))
    return {u: sorted(h) for u, h in out.items()}


class ContentionMemory:
    """Loads and saves one planner's learned contention (module docstring)."""

    def __init__(self, store: Store, workflows: Sequence[Workflow]) -> None:
        self.store = store
        self.cards = unit_cards(workflows)
        self.planner: LoadPlanner | None = None  # attach: the planner whose learning is kept
        self.machine: SharedMachine | None = None
        self._saved_at = 0  # the planner's run count at the last save
        self._lock = threading.Lock()  # one save at a time

    def load(self) -> dict[str, tuple[float, float, int]]:
        """unit -> (s, p, runs) the store learned for one of its served cards (the row with the most
        runs): the ``learned`` of a ``LoadPlanner``."""
        units = {h: u for u, hashes in self.cards.items() for h in hashes}
        best: dict[str, tuple] = {}
        for row in self.store.contention(units):
            unit = units[row.card_hash]
            if row.unit != unit:  # the same card under another unit name: not this unit's
                continue
            runs = row.runs if isinstance(row.runs, int) else -1
            if unit not in best or runs > best[unit][2]:
                best[unit] = (row.s, row.p, row.runs)
        check = ContentionLearner()
        for unit, (s, p, runs) in sorted(best.items()):
            try:
                check.restore(unit, s, p, runs)
            except ValueError as e:
                log.warning("learned contention of %s in the store ignored (%s): it starts from its prior", unit, e)
        learned = check.learned()
        if learned:
            log.info("learned contention of %d tool(s) restored from the store (%d GPU runs)", len(learned),
                     sum(n for _, _, n in learned.values()))
        return learned

    def attach(self, planner: LoadPlanner, machine: SharedMachine) -> None:
        """Keep what ``planner``, deciding on ``machine``, learns from now on."""
        self.planner, self.machine = planner, machine
        self._saved_at = planner.learner.runs

    def runs_learned(self) -> int:
        """GPU runs behind the learned contention, those restored from the store included."""
        if self.planner is None or self.machine is None:
            return 0
        learner = self.planner.learner
        return self.machine.under_lock(lambda: sum(learner.unit_runs.values()))

    def maybe_save(self) -> None:
        """Save when ``SAVE_EVERY_RUNS`` runs were learned since the last save."""
        if self.planner is not None and self.planner.learner.runs - self._saved_at >= SAVE_EVERY_RUNS:
            self.save()

    def save(self) -> None:
        """Keep every unit learned so far, under each of its served cards."""
        if self.planner is None or self.machine is None:
            return
        learner = self.planner.learner
        with self._lock:
            runs, learned = self.machine.under_lock(lambda: (learner.runs, learner.learned()))
            if runs == self._saved_at:  # nothing learned since
                return
            rows = [(u, h, s, p, n) for u, (s, p, n) in sorted(learned.items()) for h in self.cards.get(u, ())]
            try:
                self.store.save_contention(rows)
            except AgentschedError as e:
                log.warning("could not save the learned contention (%s): it stays in this process only", e)
                return
            self._saved_at = runs
