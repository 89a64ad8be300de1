"""Metrics of one loop run against the oracle. Pure functions, exact on tiny cases.

Definitions (also in docs/results.md):

* reference E2E of a mapping: its E2E in the oracle's exhaustive table (noise-free on the
  simulator); None when the mapping is infeasible.
* oracle-equivalent mappings: every feasible mapping whose reference E2E is within ``tolerance``
  (2%) of the oracle's. Near-ties are common (a task off the critical path may go either way; a
  tool without a GPU implementation ties exactly) and no measurement tells them apart, so
  placement matches are counted against the closest of them.
* best oracle match: the most tasks placed as in an oracle-equivalent mapping, over the run's
  feasible rounds (0 when no round was feasible); n/n exactly when some round was
  oracle-equivalent. ``best_match_exact`` counts against the exactly tied mappings only.
* first oracle-equivalent round: the first round (0-based, as the paper's R0, R1, ...) whose
  mapping is oracle-equivalent.
* best round: the round with the lowest measured (median) E2E; best ratio: the reference E2E of its
  mapping over the oracle's, so noise never makes a ratio drop below 1. Final: the last round.
* cumulative regret: over every execution (round runs and probes), its cost minus the oracle's
  E2E, divided by oracle E2E x executions. The cost of a feasible execution is its E2E. An
  infeasible one (oom/error) is charged the whole time it ran before failing, with nothing
  subtracted: it delivered no result, so subtracting the oracle E2E (a "saving" for crashing
  early) would reward an out-of-memory crash at t=0 over running the oracle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsched.model.execution import Execution
from agentsched.model.mapping import EQUIVALENCE_TOLERANCE, mapping_key, oracle_match
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult

_TIE_REL = 1e-9  # relative gap under which two reference E2Es are the same number

MappingKey = tuple[Mode, ...]


@dataclass(frozen=True)
class OracleView:
    """What the metrics need from an oracle search of one workflow."""

    workflow: str  # workflow name
    task_ids: tuple[str, ...]  # canonical task order of mapping keys
    e2e_ms: float  # the oracle's E2E
    best: Mapping[str, Mode]  # the oracle's mapping (first in the search's order among ties)
    best_mappings: tuple[Mapping[str, Mode], ...]  # every mapping exactly tied with the oracle's E2E
    equivalent_mappings: tuple[Mapping[str, Mode], ...]  # every mapping within the tolerance of it
    reference_e2e_ms: Mapping[MappingKey, float | None]  # mapping key -> reference E2E (None: infeasible)
    mappings_total: int  # size of the decision space searched
    feasible_total: int  # how many of them are feasible

    def reference(self, mapping: Mapping[str, Mode]) -> float | None:
        return self.reference_e2e_ms[tuple(mapping[t] for t in self.task_ids)]

    def equivalent(self, mapping: Mapping[str, Mode], tolerance: float = EQUIVALENCE_TOLERANCE) -> bool:
        ref = self.reference(mapping)
        return ref is not None and ref <= self.e2e_ms * (1 + tolerance) + 1e-9


def oracle_view(workflow: Workflow, oracle: OracleResult, tolerance: float = EQUIVALENCE_TOLERANCE) -> OracleView:
    """Index an exhaustive search for the metrics."""
    best = oracle.best
    assert best.e2e_ms is not None
    ties = tuple(
        e.mapping for e in oracle.feasible if e.e2e_ms is not None and e.e2e_ms <= best.e2e_ms * (1 + _TIE_REL)
    )
    equivalent = tuple(
        e.mapping for e in oracle.feasible if e.e2e_ms is not None and e.e2e_ms <= best.e2e_ms * (1 + tolerance) + 1e-9
    )
    return OracleView(
        workflow=workflow.name,
        task_ids=tuple(workflow.task_ids),
        e2e_ms=best.e2e_ms,
        best=dict(best.mapping),
        best_mappings=ties,
        equivalent_mappings=equivalent,
        reference_e2e_ms={mapping_key(workflow, e.mapping): e.e2e_ms for e in oracle.ranked},
        mappings_total=len(oracle.ranked),
        feasible_total=len(oracle.feasible),
    )


def execution_cost_ms(x: Execution) -> float:
    """What one execution cost: its E2E, or the time it ran before failing."""
    return x.e2e_ms if x.ok and x.e2e_ms is not None else x.elapsed_ms


def regret_ms(executions: Iterable[Execution], oracle_e2e_ms: float) -> float:
    """Sum of (E2E - oracle E2E) over feasible executions plus the full time of infeasible ones."""
    total = 0.0
    for x in executions:
        total += (execution_cost_ms(x) - oracle_e2e_ms) if x.ok else x.elapsed_ms
    return total


def regret_fraction(executions: Sequence[Execution], oracle_e2e_ms: float) -> float:
    """``regret_ms`` as a fraction of oracle E2E x executions (0 for the oracle itself)."""
    if not executions:
        return 0.0
    return regret_ms(executions, oracle_e2e_ms) / (oracle_e2e_ms * len(executions))


def best_oracle_match(mappings: Iterable[Mapping[str, Mode]], oracle_mappings: Sequence[Mapping[str, Mode]]) -> int:
    """Most tasks placed as in any oracle mapping, over ``mappings`` (0 when there are none)."""
    return max((oracle_match(m, o) for m in mappings for o in oracle_mappings), default=0)


def first_equivalent_round(
    mappings: Sequence[Mapping[str, Mode]], view: OracleView, tolerance: float = EQUIVALENCE_TOLERANCE
) -> int | None:
    """Index of the first mapping that is oracle-equivalent, or None."""
    for i, m in enumerate(mappings):
        if view.equivalent(m, tolerance):
            return i
    return None


@dataclass(frozen=True)
class RunMetrics:
    """Summary metrics of one (workflow, policy, seed) run."""

    tasks: int  # n: the match is out of this
    best_match: int  # most tasks placed as in an oracle-equivalent mapping, over feasible rounds
    best_match_exact: int  # the same against the exactly tied oracle mappings only
    first_equivalent_round: int | None  # first round within 2% of the oracle (reference E2E); None: never
    best_round: int | None  # round with the lowest measured E2E; None: no feasible round
    best_e2e_ms: float | None  # that round's measured median E2E
    best_ratio: float | None  # reference E2E of the best round's mapping / oracle E2E
    final_e2e_ms: float | None  # last round's measured median E2E (None: infeasible)
    final_ratio: float | None  # reference E2E of the last round's mapping / oracle E2E (None: infeasible)
    executions: int  # every execution, probes included
    probes: int  # of which probes
    infeasible_executions: int  # executions that failed (oom/error), charged their elapsed time
    infeasible_rounds: int  # rounds whose median could not be taken (a run failed)
    regret_ms: float  # cumulative regret in ms
    regret: float  # cumulative regret / (oracle E2E x executions)

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 3) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "tasks": self.tasks,
            "best_match": self.best_match,
            "best_match_exact": self.best_match_exact,
            "first_equivalent_round": self.first_equivalent_round,
            "best_round": self.best_round,
            "best_e2e_ms": r(self.best_e2e_ms),
            "best_ratio": r(self.best_ratio, 4),
            "final_e2e_ms": r(self.final_e2e_ms),
            "final_ratio": r(self.final_ratio, 4),
            "executions": self.executions,
            "probes": self.probes,
            "infeasible_executions": self.infeasible_executions,
            "infeasible_rounds": self.infeasible_rounds,
            "regret_ms": r(self.regret_ms),
            "regret": r(self.regret, 6),
        }


def run_metrics(run: Any, view: OracleView) -> RunMetrics:
    """Metrics of a ``LoopRun`` against the oracle ``view``."""
    rounds = run.rounds
    feasible = [r for r in rounds if r.e2e_ms is not None]
    best = min(feasible, key=lambda r: (r.e2e_ms, r.round)) if feasible else None
    final = rounds[-1]
    execs = run.all_executions()

    def ratio(mapping: Mapping[str, Mode]) -> float | None:
        ref = view.reference(mapping)
        return None if ref is None else ref / view.e2e_ms

    return RunMetrics(
        tasks=len(view.task_ids),
        best_match=best_oracle_match((r.mapping for r in feasible), view.equivalent_mappings),
        best_match_exact=best_oracle_match((r.mapping for r in feasible), view.best_mappings),
        first_equivalent_round=first_equivalent_round([r.mapping for r in rounds], view),
        best_round=None if best is None else best.round,
        best_e2e_ms=None if best is None else best.e2e_ms,
        best_ratio=None if best is None else ratio(best.mapping),
        final_e2e_ms=final.e2e_ms,
        final_ratio=None if final.e2e_ms is None else ratio(final.mapping),
        executions=run.executions_total,
        probes=run.probes_total,
        infeasible_executions=sum(1 for x in execs if not x.ok),
        infeasible_rounds=sum(1 for r in rounds if r.e2e_ms is None),
        regret_ms=regret_ms(execs, view.e2e_ms),
        regret=regret_fraction(execs, view.e2e_ms),
    )
