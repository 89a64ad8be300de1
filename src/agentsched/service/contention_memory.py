"""The live planner's learned contention, kept in the store: a restarted server resumes it.

``serve --placement live`` places every task with the load-aware planner (``planner/traffic.py``),
which learns each unit tool's contention (s, p) from the GPU runs it watches
(``planner/traffic_learn.py``). Without this module that learning lived in the process and a restart
began again from the tag priors. Here it is kept in the store's ``contention`` table
(``store/contention.py``), one row per unit tool and key, with the tool's measured ratio
(``MeasuredRatio``). The key (``unit_key``) is its card as profiled, for one call, and the machine:
on the simulator its world, on the local testbed its GPU's name and CPU count (``local.machine_id``).
A tool re-profiled on a changed machine has a new card, so its unit starts from its prior again,
while the other units keep theirs.

When: loaded once, when the service starts (``TrafficPlanner(learned=..., ratios=...)``); saved every
``SAVE_EVERY_RUNS`` learned runs (by the thread of the invocation that crossed the mark) and when
the service closes. Two servers sharing a store each save what they learned; the later save of a
unit wins (no merge). A row the learner cannot take (a damaged store) is skipped with a warning
(that unit starts from its prior; a damaged ratio alone: measured again); a store that refuses a save is a warning too: serving goes on,
the learning stays in the process, and the next try waits for another ``SAVE_EVERY_RUNS`` runs.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.workflow import Workflow
from agentsched.planner.traffic import TrafficPlanner
from agentsched.planner.traffic_learn import ContentionLearner, MeasuredRatio
from agentsched.service.realtime import SharedMachine
from agentsched.store.records import digest
from agentsched.store.store import Store
from agentsched.testbeds.live_machine import LiveMachine

SAVE_EVERY_RUNS = 200  # learned GPU runs between saves (a few seconds of a busy stream; one short write)
log = logging.getLogger("agentsched.service")


def unit_key(card: ToolCard, machine: str) -> str:
    """What a unit's learned contention is stored under: the unit's card as profiled (an amplified
    card ``clip_x12`` back to one call, so a workflow's ``repeat`` does not change it) on ``machine``."""
    unit, k = split_amplified(card.name)
    per_call = {
        "name": unit,
        "cpu_ms": f"{card.cpu_ms / k:.6g}",
        "gpu_ms": None if card.gpu_ms is None else f"{card.gpu_ms / k:.6g}",
        "load_ms": card.load_ms,
        "vram_mb": card.vram_mb,
        "tags": list(card.tags),
        "machine": machine,
    }
    return digest(per_call)


def unit_cards(workflows: Sequence[Workflow], machine: str = "") -> dict[str, list[str]]:
    """unit tool -> the keys of its served cards (``clip`` and ``clip_x12`` share one)."""
    out: dict[str, set[str]] = {}
    for wf in workflows:
        for card in wf.task_cards.values():
            out.setdefault(split_amplified(card.name)[0], set()).add(unit_key(card, machine))
    return {u: sorted(h) for u, h in out.items()}


class ContentionMemory:
    """Loads and saves one planner's learned contention (module docstring)."""

    def __init__(self, store: Store, workflows: Sequence[Workflow], machine: str = "") -> None:
        self.store = store
        self.cards = unit_cards(workflows, machine)  # machine: what else identifies the machine (sim: its world)
        self.planner: TrafficPlanner | None = None  # attach: the planner whose learning is kept
        self.machine: SharedMachine | LiveMachine | None = None
        self._saved_at = 0  # the planner's run count at the last save
        self._lock = threading.Lock()  # one save at a time
        self.restored_ratios: dict[str, float] = {}  # load: unit -> measured log ratio (a TrafficPlanner's ``ratios``)

    def load(self) -> dict[str, tuple[float, float, int]]:
        """unit -> (s, p, runs) the store learned for one of its served cards (of the rows the
        learner takes, the one with the most runs): the ``learned`` of a ``TrafficPlanner``; that row's
        measured ratio goes to ``restored_ratios`` (its ``ratios``)."""
        units = {h: u for u, hashes in self.cards.items() for h in hashes}
        learned: dict[str, tuple[float, float, int]] = {}
        ratios: dict[str, Any] = {}
        for row in self.store.contention(units):
            unit = units[row.card_hash]
            if row.unit != unit:  # the same key under another unit name: not this unit's
                continue
            try:
                ContentionLearner().restore(unit, row.s, row.p, row.runs)  # the learner's own checks
            except ValueError as e:
                log.warning("learned contention of %s in the store ignored (%s): it starts from its prior", unit, e)
                continue
            if row.runs == 0:  # a measured ratio alone (the tool never ran beside another): no (s, p) learned
                ratios.setdefault(unit, row.log_ratio)
            elif unit not in learned or row.runs > learned[unit][2]:
                learned[unit] = (row.s, row.p, row.runs)
                ratios[unit] = row.log_ratio
        self.restored_ratios = {}
        for unit, log_ratio in ratios.items():
            try:
                MeasuredRatio().restore(unit, log_ratio)  # its own checks
            except ValueError as e:
                log.warning("measured ratio of %s in the store ignored (%s): it is measured again", unit, e)
                continue
            if log_ratio:
                self.restored_ratios[unit] = float(log_ratio)
        if learned:
            log.info(
                "learned contention of %d tool(s) restored from the store (%d GPU runs)",
                len(learned),
                sum(n for _, _, n in learned.values()),
            )
        return learned

    def attach(self, planner: TrafficPlanner, machine: SharedMachine | LiveMachine) -> None:
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
        """Save when ``SAVE_EVERY_RUNS`` runs were learned since the last save (or the last try)."""
        if self.planner is not None and self.planner.learner.runs - self._saved_at >= SAVE_EVERY_RUNS:
            self.save(at_least=SAVE_EVERY_RUNS)

    def save(self, at_least: int = 1) -> None:
        """Keep every unit learned so far, under each of its served cards, when ``at_least`` runs
        were learned since the last save. Never raises: a store that refuses is a warning, and the
        next try waits for another ``SAVE_EVERY_RUNS`` runs (a locked store is not waited for at
        every invocation)."""
        if self.planner is None or self.machine is None:
            return
        learner, measured = self.planner.learner, self.planner.measured
        with self._lock:  # one save at a time; the threshold checked again under it
            runs, learned, ratios = self.machine.under_lock(
                lambda: (learner.runs, _kept(learner, measured), dict(measured.log_ratio))
            )
            if runs - self._saved_at < at_least:
                return
            self._saved_at = runs
            rows = [
                (u, h, s, p, n, ratios.get(u, 0.0))
                for u, (s, p, n) in sorted(learned.items())
                for h in self.cards.get(u, ())
            ]
            try:
                self.store.save_contention(rows)
            except AgentschedError as e:
                log.warning("could not save the learned contention (%s): it stays in this process only", e)


def _kept(learner: ContentionLearner, measured: MeasuredRatio) -> dict[str, tuple[float, float, int]]:
    """unit -> (s, p, runs) to keep: every unit learned, and every unit with a measured ratio but no
    run learned (it never ran beside another) with its parameters now and 0 runs. Why: its ratio is
    what the planner measured, worth keeping as much as a learned (s, p); a 0-run row gives back its
    ratio alone (``load``), so a prior that changes is not frozen by a store."""
    kept = learner.learned()
    for unit in measured.log_ratio:
        if unit not in kept and unit in learner.log_s:
            kept[unit] = (math.exp(learner.log_s[unit]), math.exp(learner.log_p[unit]), 0)
    return kept
