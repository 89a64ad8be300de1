"""Per-mapping evidence: what each mapping measured in the current epoch (the conditions since the
last detected change of the machine), and the noise of those measurements.

A measured mapping is judged by its measurement, never by the model: its median E2E, with a noise
interval ``median * exp(+-z * sd / sqrt(n))`` where ``sd`` is the pooled spread of log E2E across
repeated runs of the same mappings. A failure (out of memory, a tool error) does not bar a mapping that
also ran clean: it is judged by its failure rate (``failure_rate``, with a prior), so one OOM in 77 runs
is a small price and 4 in 10 a large one; a mapping that only ever failed in this epoch is ``failed``
and is not run again until the conditions change. The incumbent (``best``) is the measured mapping
with the lowest risk-adjusted median.

Stale evidence: a change the planner's own runs cannot show (a mapping it stopped running got
better) leaves old measurements standing. The machine is modelled as piecewise stationary: it
changes (another job starts sharing the GPU) at a rate of ``CHANGE_RATE`` per execution, and a
change moves a mapping's log E2E by ~N(0, ``SHIFT_SD``). So a measurement ``age`` executions old
still holds with probability ``exp(-CHANGE_RATE * age)`` (``changed_prob``); ``stale_draws`` draws
its level now from that mixture, and re-checking it gains value as it ages (the planner's probe by
value, in its budget). A re-run after a gap that disagrees with the old runs beyond the noise
supersedes them: they describe the conditions then.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from agentsched.errors import PolicyError
from agentsched.model.workflow import Mode
from agentsched.planner.vram import OOM_COST, risk_factor

Key = tuple[Mode, ...]
DEFAULT_RUN_SD = 0.03  # log spread of one run's E2E assumed before repeated runs show it
MIN_RUN_SD = 0.005
NOISE_Z = 2.0  # half-width of the noise interval, in standard errors
# why: about one change per 100 executions (20 rounds of 5), each moving a mapping by ~30%: a
# near-tie is worth a re-check after ~6 rounds unseen, a mapping 25% worse after ~15
CHANGE_RATE = 0.01  # changes of the machine per execution
SHIFT_SD = 0.3  # log shift of a mapping's E2E (or of a tool's GPU figures) by one change
PRIOR_RUNS = 4.0  # pseudo-runs of the prior on a mapping's failure rate
MAX_RATE = 0.95  # a failure rate is capped here when priced (a mapping failing always has no price)
STALE_GAP = 10  # executions between two runs of a mapping after which the newer may supersede the older


RUNS_KEPT = 256  # a mapping's most recent runs kept (a server's incumbent runs for days: memory stays flat)


def _recent() -> deque:
    return deque(maxlen=RUNS_KEPT)


@dataclass
class MappingEvidence:
    """One mapping's runs in the current epoch (the most recent ``RUNS_KEPT``)."""

    e2e_ms: deque[float] = field(default_factory=_recent)  # feasible runs
    task_logs: dict[str, deque[float]] = field(default_factory=dict)  # task -> log ms of its contended GPU runs
    failures: int = 0  # oom / error runs
    first_seen: int = 0  # execution counter when first run (audit)
    seen_at: deque[int] = field(default_factory=_recent)  # execution counter of each feasible run

    @property
    def last_seen(self) -> int:
        return self.seen_at[-1] if self.seen_at else self.first_seen

    @property
    def runs(self) -> int:
        return len(self.e2e_ms)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.e2e_ms) if self.e2e_ms else None


class Evidence:
    """Every mapping's evidence in the current epoch; older epochs are dropped on a change."""

    def __init__(self) -> None:
        self.epoch = 0
        self.by_key: dict[Key, MappingEvidence] = {}
        self.executions = 0
        self.failed_total = 0  # over all epochs (audit)
        self.superseded = 0  # stale measurements replaced by a disagreeing re-run (audit)
        self.unit_seen: dict[str, int] = {}  # GPU unit -> execution counter of its last GPU run (all epochs)

    def add(self, key: Key, e2e_ms: float | None) -> None:
        """One run of ``key``: its E2E, or None when it failed."""
        ev = self.by_key.get(key)
        if ev is None:
            ev = self.by_key[key] = MappingEvidence(first_seen=self.executions)
        if e2e_ms is None:
            ev.failures += 1
            self.failed_total += 1
        else:
            if self._superseded(ev, e2e_ms):
                ev.e2e_ms.clear()
                ev.task_logs.clear()
                ev.seen_at.clear()
                self.superseded += 1
            ev.e2e_ms.append(e2e_ms)
            ev.seen_at.append(self.executions)
        self.executions += 1

    def _superseded(self, ev: MappingEvidence, e2e_ms: float) -> bool:
        """A run after a gap of ``STALE_GAP`` executions that lies outside the old runs' noise interval
        (widened for one new run's own noise): the mapping's conditions changed since."""
        if not ev.runs or e2e_ms <= 0 or self.executions - ev.last_seen < STALE_GAP:
            return False
        sd = self.run_sd()
        gap = abs(math.log(e2e_ms) - math.log(ev.median_ms))  # type: ignore[arg-type]
        return gap > NOISE_Z * sd * math.sqrt(1 + 1 / ev.runs)

    def saw_gpu(self, units: Iterable[str]) -> None:
        """GPU runs of these units in the execution being recorded."""
        for u in units:
            self.unit_seen[u] = self.executions

    def units_changed(self) -> dict[str, float]:
        """Per unit seen on the GPU, the chance it changed since (one never seen keeps its prior's width)."""
        return {u: changed_prob(self.executions - 1 - seen) for u, seen in self.unit_seen.items()}

    def stale_keys(self, incumbent: Key | None) -> list[Key]:
        """Measured mappings other than ``incumbent`` not run for ``STALE_GAP`` executions."""
        return [k for k in self.measured_keys() if k != incumbent and self.age(k) >= STALE_GAP]

    def age(self, key: Key) -> int:
        """Executions since ``key`` last ran (0 for a mapping never run)."""
        ev = self.by_key.get(key)
        return self.executions - 1 - ev.last_seen if ev is not None else 0

    def stale_draws(
        self, key: Key, rng: np.random.Generator, n: int, predicted: tuple[float, float] | None = None
    ) -> np.ndarray:
        """``n`` draws of a measured mapping's E2E now: its median with its runs' standard error (pooled,
        in log space, with ``predicted = (E2E ms, log sd)`` where the model has one: a mapping run once
        or twice is not known to its noise, and a heavy-tailed run must not bury it), and with
        probability ``changed_prob(age)`` a change's shift."""
        ev = self.measured(key)
        if ev is None:
            raise PolicyError("stale draws need a measured mapping")
        prec = ev.runs / self.run_sd() ** 2
        mean = math.log(ev.median_ms) * prec  # type: ignore[arg-type]
        if predicted is not None and predicted[0] > 0 and predicted[1] > 0:
            mean += math.log(predicted[0]) / predicted[1] ** 2
            prec += 1 / predicted[1] ** 2
        moved = rng.random(n) < changed_prob(self.age(key))
        logs = mean / prec + rng.standard_normal(n) / math.sqrt(prec) + moved * rng.standard_normal(n) * SHIFT_SD
        return np.exp(logs)

    def add_tasks(self, key: Key, run_ms: dict[str, float]) -> None:
        """The contended GPU runs of one feasible run of ``key`` (task -> run ms)."""
        ev = self.by_key.setdefault(key, MappingEvidence(first_seen=self.executions))
        for t, ms in run_ms.items():
            if ms > 0:
                ev.task_logs.setdefault(t, _recent()).append(math.log(ms))

    def task_z(self, key: Key, run_ms: dict[str, float], floor_sd: float, min_runs: int = 3) -> float | None:
        """How far one run's contended GPU tasks lie from the same tasks in earlier runs of ``key``: the
        mean standardised deviation from each task's median, times sqrt(tasks) (None: too few runs).
        More sensitive to a change of contention than the E2E: a task off the critical path still shows it."""
        ev = self.by_key.get(key)
        if ev is None:
            return None
        num, dof = 0.0, 0
        for logs in ev.task_logs.values():
            if len(logs) > 1:
                m = sum(logs) / len(logs)
                num += sum((x - m) ** 2 for x in logs)
                dof += len(logs) - 1
        sd = max(floor_sd, math.sqrt(num / dof)) if dof >= 3 else None
        zs = [
            (math.log(ms) - statistics.median(ev.task_logs[t])) / sd
            for t, ms in run_ms.items()
            if sd is not None and ms > 0 and len(ev.task_logs.get(t, ())) >= min_runs
        ]
        return sum(zs) / math.sqrt(len(zs)) if zs else None

    def new_epoch(self) -> None:
        """The machine changed: what was measured before says nothing about now."""
        self.epoch += 1
        self.by_key.clear()

    def failed(self, key: Key) -> bool:
        """``key`` failed in this epoch and never ran clean in it."""
        ev = self.by_key.get(key)
        return ev is not None and ev.failures > 0 and not ev.runs

    def failures(self, key: Key) -> int:
        ev = self.by_key.get(key)
        return ev.failures if ev is not None else 0

    def failure_rate(self, key: Key, prior_risk: float = 0.0, prior_runs: float = PRIOR_RUNS) -> float:
        """Chance a run of ``key`` fails: its failures and clean runs of this epoch over a prior of
        ``prior_runs`` pseudo-runs at ``prior_risk`` (a Beta mean)."""
        ev = self.by_key.get(key)
        f, n = (ev.failures, ev.runs) if ev is not None else (0, 0)
        return (f + prior_runs * prior_risk) / (f + n + prior_runs)

    def adjusted_ms(
        self, key: Key, prior_risk: float = 0.0, prior_runs: float = PRIOR_RUNS, oom_cost: float = OOM_COST
    ) -> float | None:
        """A measured mapping's median E2E times the cost of its failure rate (``vram.risk_factor``)."""
        ev = self.measured(key)
        if ev is None:
            return None
        rate = min(self.failure_rate(key, prior_risk, prior_runs), MAX_RATE)
        return ev.median_ms * risk_factor(rate, oom_cost)  # type: ignore[operator]

    def measured(self, key: Key) -> MappingEvidence | None:
        """The evidence of ``key`` if it ran feasibly in this epoch (failures beside clean runs count in
        its failure rate, not against its median)."""
        ev = self.by_key.get(key)
        return ev if ev is not None and ev.runs else None

    def measured_keys(self) -> list[Key]:
        return [k for k in self.by_key if self.measured(k) is not None]

    def run_sd(self) -> float:
        """Pooled log spread of one run (mappings run at least twice), else the default."""
        num, dof = 0.0, 0
        for ev in self.by_key.values():
            if ev.runs > 1:
                logs = [math.log(x) for x in ev.e2e_ms]
                m = sum(logs) / len(logs)
                num += sum((x - m) ** 2 for x in logs)
                dof += len(logs) - 1
        if dof < 3:
            return DEFAULT_RUN_SD
        # why: a prior pseudo-count keeps a few lucky equal runs from claiming no noise at all
        return max(MIN_RUN_SD, math.sqrt((num + 2 * DEFAULT_RUN_SD**2) / (dof + 2)))

    def interval(self, key: Key) -> tuple[float, float] | None:
        """(low, high) noise interval of the median E2E of a measured mapping."""
        ev = self.measured(key)
        if ev is None:
            return None
        half = NOISE_Z * self.run_sd() / math.sqrt(ev.runs)
        med = ev.median_ms
        return med * math.exp(-half), med * math.exp(half)  # type: ignore[operator]

    def best(self, prior_runs: float = PRIOR_RUNS, oom_cost: float = OOM_COST) -> Key | None:
        """The incumbent: the measured mapping with the lowest risk-adjusted median (``adjusted_ms``, no
        predicted risk: what it measured alone; ties: more runs, then mode order)."""
        keys = self.measured_keys()
        if not keys:
            return None
        return min(
            keys,
            key=lambda k: (self.adjusted_ms(k, 0.0, prior_runs, oom_cost), -self.by_key[k].runs, [m.value for m in k]),
        )


def changed_prob(age: float) -> float:
    """Chance that the machine changed within ``age`` executions."""
    return 1.0 - math.exp(-CHANGE_RATE * max(0.0, age))
