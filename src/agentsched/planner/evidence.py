"""Per-mapping evidence: what each mapping measured in the current epoch (the conditions since the
last detected change of the machine), and the noise of those measurements.

A measured mapping is judged by its measurement, never by the model: its median E2E, with a noise
interval ``median * exp(+-z * sd / sqrt(n))`` where ``sd`` is the pooled spread of log E2E across
repeated runs of the same mappings. A mapping that failed (out of memory, a tool error) in this
epoch is never proposed again until the conditions change.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from agentsched.model.workflow import Mode

Key = tuple[Mode, ...]
DEFAULT_RUN_SD = 0.03  # log spread of one run's E2E assumed before repeated runs show it
MIN_RUN_SD = 0.005
NOISE_Z = 2.0  # half-width of the noise interval, in standard errors


@dataclass
class MappingEvidence:
    """One mapping's runs in the current epoch."""

    e2e_ms: list[float] = field(default_factory=list)  # feasible runs
    task_logs: dict[str, list[float]] = field(default_factory=dict)  # task -> log ms of its contended GPU runs
    failures: int = 0  # oom / error runs
    first_seen: int = 0  # execution counter when first run (audit)

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

    def add(self, key: Key, e2e_ms: float | None) -> None:
        """One run of ``key``: its E2E, or None when it failed."""
        ev = self.by_key.get(key)
        if ev is None:
            ev = self.by_key[key] = MappingEvidence(first_seen=self.executions)
        self.executions += 1
        if e2e_ms is None:
            ev.failures += 1
            self.failed_total += 1
        else:
            ev.e2e_ms.append(e2e_ms)

    def add_tasks(self, key: Key, run_ms: dict[str, float]) -> None:
        """The contended GPU runs of one feasible run of ``key`` (task -> run ms)."""
        ev = self.by_key.setdefault(key, MappingEvidence(first_seen=self.executions))
        for t, ms in run_ms.items():
            if ms > 0:
                ev.task_logs.setdefault(t, []).append(math.log(ms))

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
        zs = [(math.log(ms) - statistics.median(ev.task_logs[t])) / sd for t, ms in run_ms.items()
              if sd is not None and ms > 0 and len(ev.task_logs.get(t, ())) >= min_runs]
        return sum(zs) / math.sqrt(len(zs)) if zs else None

    def new_epoch(self) -> None:
        """The machine changed: what was measured before says nothing about now."""
        self.epoch += 1
        self.by_key.clear()

    def failed(self, key: Key) -> bool:
        ev = self.by_key.get(key)
        return ev is not None and ev.failures > 0

    def measured(self, key: Key) -> MappingEvidence | None:
        """The evidence of ``key`` if it ran feasibly and never failed in this epoch."""
        ev = self.by_key.get(key)
        return ev if ev is not None and ev.runs and not ev.failures else None

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

    def best(self) -> Key | None:
        """The measured mapping with the lowest median E2E (ties: more runs, then mode order)."""
        keys = self.measured_keys()
        if not keys:
            return None
        return min(keys, key=lambda k: (self.by_key[k].median_ms, -self.by_key[k].runs, [m.value for m in k]))
