"""Brute-force oracle: run every mapping of the decision space, drop infeasible ones, rank by E2E.

On a deterministic testbed (the noise-free simulator) one run per mapping is exact; otherwise each
mapping is run ``repeats`` times and ranked by the median E2E (a mapping counts as infeasible when
any run of it fails). The oracle is an offline reference, not an online policy.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from agentsched.errors import AgentschedError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import EQUIVALENCE_TOLERANCE, enumerate_mappings
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.base import Testbed

MAX_ORACLE_MAPPINGS = 60_000  # 3^10 = 59,049: about 10 s on the simulator; 3^12 took ~2 min


@dataclass(frozen=True, slots=True)
class OracleEntry:
    """One mapping's outcome under exhaustive search."""

    mapping: dict[str, Mode]  # task id -> mode
    status: Status  # ok, or the first failure seen
    e2e_ms: float | None  # median E2E over the runs; None when infeasible
    peak_vram_mb: float  # max over the runs
    execution: Execution  # a representative run (the noise-free one on the simulator)

    def to_dict(self) -> dict:
        return {
            "mapping": {k: v.value for k, v in self.mapping.items()},
            "status": self.status.value,
            "e2e_ms": None if self.e2e_ms is None else round(self.e2e_ms, 3),
            "peak_vram_mb": round(self.peak_vram_mb, 3),
        }


@dataclass(frozen=True, slots=True)
class OracleResult:
    workflow: str  # workflow name
    ranked: tuple[OracleEntry, ...]  # feasible by ascending E2E, then infeasible
    executions: int  # testbed executions spent

    @property
    def feasible(self) -> list[OracleEntry]:
        return [e for e in self.ranked if e.e2e_ms is not None]

    @property
    def best(self) -> OracleEntry:
        feas = self.feasible
        if not feas:
            raise AgentschedError(f"workflow {self.workflow}: no feasible mapping (every one runs out of VRAM)")
        return feas[0]

    def entry(self, mapping: dict[str, Mode]) -> OracleEntry:
        for e in self.ranked:
            if e.mapping == mapping:
                return e
        raise KeyError(mapping)

    def equivalent(self, mapping: dict[str, Mode], tol: float = EQUIVALENCE_TOLERANCE) -> bool:
        """True when ``mapping`` is feasible with E2E within ``tol`` of the best."""
        e = self.entry(mapping)
        return e.e2e_ms is not None and e.e2e_ms <= self.best.e2e_ms * (1 + tol)


def brute_force(
    workflow: Workflow,
    testbed: Testbed,
    *,
    repeats: int = 5,
    rng: random.Random | None = None,
    use_expected: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> OracleResult:
    """Exhaustive search over the decision space of ``workflow`` on ``testbed``.

    ``use_expected``: take the testbed's noise-free execution when it has one (the simulator), so
    one run per mapping is exact; False measures the median of ``repeats`` noisy runs instead.
    """
    n = len(workflow.tasks)
    k = len(workflow.decision_space.modes)
    if n > 60 or k**n > MAX_ORACLE_MAPPINGS:  # 2^5000 would print 1,506 digits
        count = f"{k**n:,}" if n <= 40 else f"about 10^{n * math.log10(k):,.0f}"
        raise AgentschedError(
            f"brute force over {n} tasks is too large ({k}^{n} = {count} mappings; limit {MAX_ORACLE_MAPPINGS:,})"
        )
    if repeats < 1:
        raise AgentschedError(f"repeats must be >= 1, got {repeats}")
    entries: list[OracleEntry] = []
    runs = 0
    total = len(workflow.decision_space.modes) ** n
    cards = workflow.task_cards
    measured: dict[tuple, tuple[Status, float | None, float, Execution]] = {}
    for i, mapping in enumerate(enumerate_mappings(workflow)):
        # A host-only tool on a GPU mode is the same run as on the CPU (rules.Dispatcher): measure
        # each distinct run once, so identical mappings tie exactly on a noisy testbed too.
        canonical = tuple(effective_mapping(cards, mapping).items())
        if canonical not in measured:
            exact = testbed.expected(workflow, mapping) if use_expected else None
            if exact is not None:
                execs = [exact]
            else:
                execs = [testbed.run(workflow, mapping, rng=rng) for _ in range(repeats)]
            runs += len(execs)
            bad = next((x for x in execs if not x.ok), None)
            peak = max(x.peak_vram_mb for x in execs)
            if bad is not None:
                measured[canonical] = (bad.status, None, peak, bad)
            else:
                med = statistics.median(x.e2e_ms for x in execs)  # type: ignore[misc]
                rep = min(execs, key=lambda x: abs(x.e2e_ms - med))  # type: ignore[operator]
                measured[canonical] = (Status.OK, med, peak, rep)
        status, e2e, peak, rep = measured[canonical]
        entries.append(OracleEntry(mapping, status, e2e, peak, rep))
        if progress is not None:
            progress(i + 1, total)
    entries.sort(key=lambda e: (e.e2e_ms is None, e.e2e_ms if e.e2e_ms is not None else 0.0))
    return OracleResult(workflow.name, tuple(entries), runs)
