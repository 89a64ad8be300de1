"""The invocation's end, for the load-aware planner (``load.py``): what a task's finish is worth.

An invocation's latency is the end of its last task, so a task's own finish matters only where it
sets that end. For a ready task t of invocation i the planner compares options by the predicted end
of i, ``max(finish_t + tail_t, others_end)``, where

* ``tail_t`` is the longest path of t's successors, each at its faster card time (what must still
  run after t);
* ``others_end`` is the latest predicted end among the tasks of i that may overlap t: those already
  placed (the planner's own prediction when it placed them, never earlier than now) and those ready
  but not placed yet (their best start now), each plus its own tail.

A task with slack (its siblings end later anyway) then costs the same on the CPU as on the GPU, and
the delay it would inflict on other invocations' GPU tasks decides: the GPU stays free for tasks
on a critical path. Only the planner's own predictions are stored here, never the world.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from agentsched.model.live import Invocation
from agentsched.model.workflow import Workflow

PRUNE_EVERY = 256  # placements between drops of finished invocations' predictions


class InvocationEnds:
    """Predicted ends of the tasks placed, per invocation in flight, and each workflow's tails."""

    def __init__(self) -> None:
        self._ends: dict[int, tuple[Invocation, dict[str, float]]] = {}  # id -> (invocation, task -> end ms)
        self._tails: dict[str, dict[str, float]] = {}  # workflow name -> task -> tail ms
        self._placed = 0

    def tail_ms(self, wf: Workflow) -> dict[str, float]:
        """Per task: the longest path after it, each successor at its faster card time."""
        got = self._tails.get(wf.name)
        if got is None:
            cards, got = wf.task_cards, {}
            for t in reversed(wf.topo_order):
                got[t] = max((_best_ms(cards[s].cpu_ms, cards[s].gpu_ms) + got[s] for s in wf.succs[t]), default=0.0)
            self._tails[wf.name] = got
        return got

    def others_end_ms(
        self, inv: Invocation, task: str, now_ms: float, ready_finish_ms: Callable[[str], float]
    ) -> float:
        """Latest predicted end (absolute) of the tasks of ``inv`` that may overlap ``task`` (module
        docstring); ``ready_finish_ms(u)``: the best finish of ready task u from now (relative)."""
        wf = inv.workflow
        tails = self.tail_ms(wf)
        ends = self._ends.get(inv.id, (inv, {}))[1]
        out = now_ms
        for u in wf.concurrent[task]:
            if u in ends:
                out = max(out, max(ends[u], now_ms) + tails[u])
            elif u not in inv.mapping and inv.waiting_preds.get(u, 1) == 0:
                out = max(out, now_ms + ready_finish_ms(u) + tails[u])
        return out

    def placed(self, inv: Invocation, task: str, end_ms: float) -> None:
        """``task`` of ``inv`` was placed, predicted to end at ``end_ms``."""
        self._ends.setdefault(inv.id, (inv, {}))[1][task] = end_ms
        self._placed += 1
        if self._placed % PRUNE_EVERY == 0:
            self._ends = {k: v for k, v in self._ends.items() if v[0].status in ("running", "waiting")}


def _best_ms(cpu_ms: float, gpu_ms: float | None) -> float:
    return min(cpu_ms, math.inf if gpu_ms is None else gpu_ms)
