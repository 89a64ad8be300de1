"""Helpers shared by the classical baselines: which tasks may run at the same time, a VRAM guard
that keeps static placements feasible under any timing, a card-based lower bound on E2E, and a
card-based test for mappings that must run out of memory.

Only cards and the DAG are used here, never a testbed or the oracle.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow, fits_vram

_EPS = 1e-9


class VramGuard:
    """Admits GPU placements one by one so that no timing can exceed the budget.

    A placement of ``t`` is admitted when its VRAM plus that of every admitted task that may run
    beside it fits the budget. Any set of tasks running together is an antichain of the DAG, and
    its last-admitted member was checked against all the others, so an ``ok`` is guaranteed for
    ``gpu_now`` placements whatever the durations turn out to be. Conservative on purpose: static
    schedulers cannot predict the real timeline under contention.
    """

    def __init__(self, workflow: Workflow, cards: Mapping[str, ToolCard]) -> None:
        self.workflow = workflow
        self.cards = cards
        self.budget_mb = workflow.vram_budget_mb  # None: no budget, everything fits
        self.admitted: list[str] = []  # tasks placed on the GPU so far
        self._mask = 0  # bit i: the i-th task (file order) is admitted
        self._rank: dict[int, int] = {}  # file index of an admitted task -> its place in ``admitted``

    def fits(self, task: str) -> bool:
        if self.budget_mb is None:
            return True
        need = self.cards[task].vram_needed_mb
        # the admitted tasks that may overlap ``task``: admitted bits outside its related mask. Why:
        # testing every admitted task made a plan quadratic in the GPU tasks under a budget; this
        # costs the overlapping ones only. Summed in admission order, as before.
        free = self._mask & ~self.workflow.related_masks[task]
        ranks = []
        while free:
            low = free & -free
            ranks.append(self._rank[low.bit_length() - 1])
            free ^= low
        beside = sum(self.cards[self.admitted[r]].vram_needed_mb for r in sorted(ranks))
        return fits_vram(beside, need, self.budget_mb)

    def admit(self, task: str) -> None:
        i = self.workflow.task_index[task]
        if not (self._mask >> i) & 1:  # admitted once: a task runs once
            self._mask |= 1 << i
            self._rank[i] = len(self.admitted)
            self.admitted.append(task)


def critical_path_ms(workflow: Workflow, cost_ms: Mapping[str, float]) -> float:
    """Longest path through the DAG with the given per-task costs (communication is free)."""
    finish: dict[str, float] = {}
    for t in workflow.topo_order:
        start = max((finish[p] for p in workflow.preds[t]), default=0.0)
        finish[t] = start + cost_ms[t]
    return max(finish.values())


def lower_bound_ms(workflow: Workflow, cards: Mapping[str, ToolCard]) -> float:
    """No mapping can beat this E2E: each task at its faster isolated device, no load, no contention."""
    return critical_path_ms(
        workflow, {t: min(c.cpu_ms, c.gpu_ms if c.gpu_ms is not None else c.cpu_ms) for t, c in cards.items()}
    )


def certainly_infeasible(workflow: Workflow, cards: Mapping[str, ToolCard], mapping: Mapping[str, Mode]) -> bool:
    """True when the cards alone prove the mapping runs out of memory, whatever the timing.

    Two cases are certain under the start rules: a GPU task larger than the whole budget, and
    ``gpu_now`` source tasks (all ready at t=0, started together before any queue admission) whose
    VRAM sum exceeds the budget. Anything else depends on timing and must be tried.
    """
    budget = workflow.vram_budget_mb
    if budget is None:
        return False
    for t, m in mapping.items():
        if m is not Mode.CPU and not fits_vram(0.0, cards[t].vram_needed_mb, budget):
            return True
    at_zero = sum(
        cards[t].vram_needed_mb for t in workflow.task_ids if not workflow.preds[t] and mapping[t] is Mode.GPU_NOW
    )
    return not fits_vram(0.0, at_zero, budget)


class CpuCores:
    """CPU cores of a list scheduler, each running one task at a time, with insertion into gaps
    (Topcuoglu et al.'s insertion-based policy): a task may start in an idle gap between two
    already-scheduled tasks when it fits there."""

    def __init__(self, cores: int) -> None:
        if cores < 1:
            raise ValueError(f"cpu cores must be >= 1, got {cores}")
        self.busy: list[list[tuple[float, float]]] = [[] for _ in range(cores)]  # per core: sorted (start, end)
        self._ends_upto: list[list[float]] = [[] for _ in range(cores)]  # per core: running max of the ends
        self.used = 0  # cores 0..used-1 have bookings

    def earliest(self, ready_ms: float, cost_ms: float) -> tuple[float, int]:
        """(start_ms, core) of the earliest finish for a task ready at ``ready_ms``; lowest core on ties."""
        best: tuple[float, int] | None = None
        # cores are booked lowest first, so the unused ones are a suffix and all alike: scan the used
        # ones and the first unused one only (linear in the cores in use, not in all of them)
        for core in range(min(self.used + 1, len(self.busy))):
            start = ready_ms
            slots = self.busy[core]
            # slots that all end by ready_ms neither move the start nor (for cost > eps) take the task
            # in front of them: skip them by bisection. Why: scanning every booking of every core
            # per task was quadratic (most of a starpu round at 10,000 tasks). Same result.
            first = bisect.bisect_right(self._ends_upto[core], ready_ms) if cost_ms > _EPS else 0
            for s, e in slots[first:]:
                if start + cost_ms <= s + _EPS:
                    break  # fits in the gap before this slot
                start = max(start, e)
            if best is None or start < best[0] - _EPS:
                best = (start, core)
                if start <= ready_ms + _EPS:
                    break  # nothing starts earlier, and a later core would lose the tie
        assert best is not None
        return best

    def book(self, core: int, start_ms: float, end_ms: float) -> None:
        slots = self.busy[core]
        slots.append((start_ms, end_ms))
        slots.sort()
        self._ends_upto[core] = list(itertools.accumulate((e for _, e in slots), max))
        self.used = max(self.used, core + 1)
