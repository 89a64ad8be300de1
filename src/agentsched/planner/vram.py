"""VRAM safety: feasibility robust to timing, and what an out-of-memory execution teaches.

The start rules decide OOM at a ``gpu_now`` start: what is held then plus the task's VRAM must fit.
The predicted timeline is one start order among those the noise allows; a mapping that fits only
because a GPU task is predicted to end a few percent before another starts fails whenever the
noise swaps them. So a mapping is *robustly* feasible when, at every ``gpu_now`` start s of a task X,
X's VRAM plus that of every GPU task Y that may hold VRAM then still fits, where Y may hold it when
Y can run beside X at all (``Workflow.concurrent``: not an ancestor or descendant) and its predicted
holding interval [a, b], widened by a relative timing error ``rel`` (a*(1-rel), b*(1+rel)), meets
s widened the same way. ``rel`` and a VRAM margin grow with what the runs show (``VramSafety``).

The mapping's *risk* is the chance that the timing error (a relative sd, ``timing_sd``) exceeds its
slack; a candidate is valued at its risk (``E2E / (1 - risk)``: a failed run delivers nothing).
An OOM names the failing start and shows who held VRAM then (the spans still open); that set is a
*conflict*: a mapping placing the failing task and every holder as then, *and* whose predicted
timeline makes the task's start meet every holder's interval (widened by the timing error), carries
at least ``CONFLICT_RISK`` times the conflict's weight; the weight halves with every ``half_runs``
clean executions of mappings that repeat the conflict, and a conflict below ``min_weight`` is
forgotten (as are all at a detected change). An OOM also bounds the failing tool's real VRAM:
it needed more than the budget less what the holders held (``vram_floor_mb``). An OOM the risk did
not foresee widens ``timing_sd``.

A mapping the model predicts infeasible is not certainly so: its *distance*
(``feasibility_distance``) is the smallest relative timing error under which every ``gpu_now`` start
fits, and its risk the chance the real timing is not that far off (``infeasible_risk``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentsched.model.execution import Execution
from agentsched.model.workflow import VRAM_EPS_MB, Mode, Workflow

MAX_SLACK = 0.5  # slack beyond this is reported as inf (no risk at any plausible timing error)
DEFAULT_TIMING_SD = 0.01  # relative timing error (sd) assumed for starts and ends
MAX_TIMING_SD = 0.3
SD_GROWTH = 1.5  # an OOM the risk did not foresee widens the timing error by this factor
FORESEEN_RISK = 0.2  # an OOM of a mapping given at least this risk was foreseen
OOM_COST = 2.0  # a failed run counts as this many extra runs' time beyond its retry
CONFLICT_RISK = 0.3  # least risk of an unmeasured mapping that repeats an observed OOM conflict


def timing_slack(
    workflow: Workflow,
    budget_mb: float | None,
    gpu_now: list[str],
    holds: Mapping[str, tuple[float, float, float]],
    margin_mb: float = 0.0,
) -> float:
    """The smallest relative timing error ``rel`` under which some ``gpu_now`` start may break the budget
    (0: it already does; inf: no order can, or none within ``MAX_SLACK``). ``holds[t] = (start_ms, end_ms, vram_mb)`` of every task
    that held VRAM. A holder Y meets X's start s once b*(1+rel) > s*(1-rel) (Y ends before s) or
    a*(1-rel) <= s*(1+rel) (Y starts after s); the holders join in the order of those thresholds. A holder
    ordered with counted ones (their ancestor or descendant) cannot hold beside them: it replaces them only
    where it holds more."""
    if budget_mb is None:
        return math.inf
    limit = budget_mb + VRAM_EPS_MB - margin_mb
    if sum(v for _, _, v in holds.values()) <= limit:  # everything at once fits: no order can fail
        return math.inf
    concurrent = workflow.concurrent
    slack = math.inf
    items = sorted(holds.items(), key=lambda kv: kv[1][0])
    starts = [a for _, (a, _, _) in items]
    grow, shrink = (1 + MAX_SLACK) / (1 - MAX_SLACK), (1 - MAX_SLACK) / (1 + MAX_SLACK)
    for x in gpu_now:
        s, _, held = holds[x]
        beside = concurrent[x]
        joins: list[tuple[float, float, str]] = []
        members: dict[str, float] = {}  # the holders counted at s besides x
        # only holders whose interval comes within MAX_SLACK of s can matter (starts sorted: cut the late ones)
        for y, (a, b, v) in items[: bisect.bisect_right(starts, s * grow)]:
            if b <= s * shrink or y == x or y not in beside:
                continue
            if a <= s < b:
                held += v
                members[y] = v
            elif b <= s:
                joins.append(((s - b) / (s + b) if s + b > 0 else 0.0, v, y))
            else:
                joins.append(((a - s) / (a + s), v, y))
        if held > limit:
            return 0.0
        joins.sort()
        for r, v, y in joins:
            if r >= slack:
                break
            # a holder ordered with a counted one (its ancestor or descendant) never holds beside it:
            # the larger of the two sides is what may meet s
            ordered = [m for m in members if m not in concurrent[y]]
            freed = sum(members[m] for m in ordered)
            if freed >= v:
                continue
            for m in ordered:
                del members[m]
            held += v - freed
            members[y] = v
            if held > limit:
                slack = r
                break
    return slack


def feasibility_distance(
    workflow: Workflow,
    budget_mb: float | None,
    gpu_now: list[str],
    holds: Mapping[str, tuple[float, float, float]],
    margin_mb: float = 0.0,
) -> float:
    """The smallest relative timing error ``rel`` under which every ``gpu_now`` start fits (0: it fits as
    predicted; inf: no shift of the holders can make room). A holder Y = [a, b] meeting X's start s
    leaves it once b*(1-rel) <= s*(1+rel) or a*(1+rel) >= s*(1-rel); holders that start in the same
    instant as X never leave (the same predecessor made both ready: no noise separates them)."""
    if budget_mb is None:
        return 0.0
    limit = budget_mb + VRAM_EPS_MB - margin_mb
    concurrent = workflow.concurrent
    worst = 0.0
    for x in gpu_now:
        s, _, held = holds[x]
        leave: list[tuple[float, float]] = []
        for y, (a, b, v) in holds.items():
            if y == x or y not in concurrent[x] or not a <= s < b:
                continue
            held += v
            tie = abs(s - a) <= 1e-9 * max(1.0, s)
            leave.append((math.inf if tie else min((b - s) / (b + s), (s - a) / (s + a)), v))
        leave.sort()
        need = 0.0
        for r, v in leave:
            if held <= limit:
                break
            held -= v
            need = r
        if held > limit:
            return math.inf
        worst = max(worst, need)
    return worst


def infeasible_risk(distance: float, timing_sd: float) -> float:
    """Chance that a mapping predicted infeasible by ``distance`` runs out of memory: the timing error
    (relative sd ``timing_sd``) stays below that distance."""
    return 1.0 - oom_risk(distance, timing_sd)


def risk_factor(risk: float, oom_cost: float = OOM_COST) -> float:
    """Cost multiplier of an OOM risk: the retries a failure needs (1 / (1 - risk)) plus, as a failed
    invocation is worse than a slow one, ````oom_cost`` times the expected failures per success."""
    return (1.0 + oom_cost * risk / (1.0 - risk)) / (1.0 - risk)


def oom_risk(slack: float, timing_sd: float) -> float:
    """Probability that the timing noise (relative sd ``timing_sd``) exceeds a mapping's slack (one-sided normal)."""
    if not math.isfinite(slack):
        return 0.0
    if timing_sd <= 0:
        return 1.0 if slack <= 0 else 0.0
    return 0.5 * math.erfc(slack / (timing_sd * math.sqrt(2)))


def vram_floor_mb(x: Execution, budget_mb: float | None, most: Mapping[str, float | None]) -> tuple[str, float] | None:
    """What an OOM says of the failing task's real VRAM: (task, floor) with need > budget - held, held
    the VRAM of the tasks holding it then: a started holder's as its span measured it, else the most it
    may hold (``most``; so the floor stays a lower bound). None for another failure, without a budget,
    or when a holder's VRAM has no known upper bound."""
    c = conflict_of(x)
    if c is None or budget_mb is None:
        return None
    measured = {s.task: s.vram_mb for s in x.spans if s.vram_mb > 0}
    held = 0.0
    for h in c.holders:
        v = measured.get(h, most.get(h))
        if v is None:
            return None
        held += v
    return c.task, budget_mb - held


def explained_peak_mb(x: Execution, vram_of: Mapping[str, float]) -> float:
    """The peak VRAM the model's per-task figures explain for the GPU spans of ``x`` (the most held at
    once, by a sweep over starts and ends; an end at a start's instant frees first); a measured
    ``peak_vram_mb`` above it is VRAM the model misses."""
    events = []
    for s in x.spans:
        if s.mode is not Mode.CPU and s.vram_mb > 0:
            v = vram_of.get(s.task, s.vram_mb)
            events.append((s.start_ms, 1, v))
            if s.end_ms is not None:
                events.append((s.end_ms, 0, -v))
    held = best = 0.0
    for _, _, v in sorted(events):
        held += v
        best = max(best, held)
    return best


@dataclass(frozen=True, slots=True)
class Conflict:
    """An observed OOM: ``task`` started on ``mode`` while ``holders`` held VRAM on the GPU, each
    placed as in ``holder_modes`` (a gpu_now holder moved to the queue waits for room instead)."""

    task: str
    mode: Mode
    holders: frozenset[str]
    holder_modes: frozenset[tuple[str, Mode]] = frozenset()

    def matches(self, mapping: Mapping[str, Mode]) -> bool:
        if mapping[self.task] is not self.mode:
            return False
        if self.holder_modes:
            return all(mapping[h] is m for h, m in self.holder_modes)
        return all(mapping[h] is not Mode.CPU for h in self.holders)

    def overlaps(self, holds: Mapping[str, tuple[float, float, float]] | None, rel: float) -> bool:
        """Does the predicted timeline (``holds[t] = (start, end, vram)``) put the task's start within every
        holder's interval, each widened by ``rel``? None (no timeline): assumed so."""
        if holds is None or self.task not in holds:
            return True
        s = holds[self.task][0]
        for h in self.holders:
            if h not in holds:
                return False
            a, b, _ = holds[h]
            if not (a * (1 - rel) <= s * (1 + rel) and b * (1 + rel) > s * (1 - rel)):
                return False
        return True


def conflict_of(x: Execution) -> Conflict | None:
    """The conflict an OOM execution shows (None for a feasible run or another failure)."""
    task = x.extra.get("failed_task") if isinstance(x.extra, dict) else None
    if x.ok or x.status.value != "oom" or not isinstance(task, str) or task not in x.mapping:
        return None
    held = x.extra.get("held_by")  # a start the rules refused: the driver names who held VRAM then
    if isinstance(held, list) and all(isinstance(h, str) and h in x.mapping for h in held):
        holders = frozenset(h for h in held if h != task)
    else:  # a tool that ran out of memory: the tasks still running when it failed
        holders = frozenset(s.task for s in x.spans if s.end_ms is None and s.vram_mb > 0 and s.task != task)
    return Conflict(task, x.mapping[task], holders, frozenset((h, x.mapping[h]) for h in holders))


@dataclass
class VramSafety:
    """What the runs taught about VRAM in the current epoch."""

    timing_sd: float = DEFAULT_TIMING_SD  # relative timing error of starts and ends
    margin_mb: float = 0.0  # measured peaks above the prediction (VRAM the model does not see)
    conflicts: dict[Conflict, int] = field(default_factory=dict)  # conflict -> clean runs repeating it since
    conflict_risk: float = CONFLICT_RISK
    half_runs: float = 3.0  # a conflict's weight halves with this many clean runs repeating it
    min_weight: float = 0.1  # a conflict weighing less is forgotten

    def weight(self, c: Conflict) -> float:
        return 0.5 ** (self.conflicts.get(c, 0) / self.half_runs)

    def risky(self, mapping: Mapping[str, Mode]) -> bool:
        return any(c.matches(mapping) for c in self.conflicts)

    def risk(
        self,
        slack: float,
        mapping: Mapping[str, Mode] | None = None,
        holds: Mapping[str, tuple[float, float, float]] | None = None,
    ) -> float:
        """OOM risk of a mapping of that slack; at least ``conflict_risk`` x weight of each conflict it
        repeats where its predicted timeline (``holds``, when known) makes the conflict's tasks meet."""
        r = oom_risk(slack, self.timing_sd)
        if mapping is not None:
            rel = 3 * self.timing_sd
            for c in self.conflicts:
                if c.matches(mapping) and c.overlaps(holds, rel):
                    r = max(r, self.conflict_risk * self.weight(c))
        return r

    def learn_clean(self, mapping: Mapping[str, Mode]) -> None:
        """A clean execution: each conflict it repeats weighs less; one below ``min_weight`` is forgotten."""
        for c in [c for c in self.conflicts if c.matches(mapping)]:
            self.conflicts[c] += 1
            if self.weight(c) < self.min_weight:
                del self.conflicts[c]

    def learn_oom(self, x: Execution, predicted_risk: float) -> Conflict | None:
        """An OOM: remember its conflict (at full weight); if the mapping's risk was thought small, widen
        the timing error. Returns the conflict."""
        c = conflict_of(x)
        if c is not None:
            self.conflicts[c] = 0
        if predicted_risk < FORESEEN_RISK:
            self.timing_sd = min(MAX_TIMING_SD, self.timing_sd * SD_GROWTH)
        return c

    def learn_peak(self, measured_mb: float, explained_mb: float) -> None:
        """A feasible run held more than the model's VRAM figures explain: keep the excess as a margin."""
        self.margin_mb = max(self.margin_mb, measured_mb - explained_mb)

    def new_epoch(self) -> None:
        self.conflicts.clear()

    def to_dict(self) -> dict[str, float]:
        return {
            "timing_sd": round(self.timing_sd, 4),
            "margin_mb": round(self.margin_mb, 1),
            "conflicts": len(self.conflicts),
        }
