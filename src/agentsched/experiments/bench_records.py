"""The bench's records: what to run (``BenchConfig``), one run (``BenchRecord``), a scenario and
policy over its seeds (``SummaryRow``) and everything one bench produced (``BenchResult``). Apart from
``bench.py`` so that the journal's codec and the results writers can name them without importing the
harness that imports them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentsched.agent.secrets import redact_options
from agentsched.experiments.paper import is_paper_scenario
from agentsched.loop.metrics import EQUIVALENCE_TOLERANCE, OracleView, RunMetrics
from agentsched.loop.runner import LoopRun
from agentsched.model.execution import Execution
from agentsched.model.workflow import Workflow
from agentsched.oracle import OracleResult
from agentsched.testbeds.spec import TestbedSpec


def jsonable(obj: Any) -> Any:
    """Options as JSON (an object with ``to_dict``, e.g. an ``LLMConfig``, as that dict, which
    leaves its key out; any other object as its type name)."""
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return jsonable(obj.to_dict())
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return f"<{type(obj).__name__}>"


DEFAULT_GANTT_SCENARIO = "S5"  # the paper's Table 2 contention example


@dataclass(frozen=True)
class BenchConfig:
    """What to run."""

    scenarios: tuple[str, ...]  # built-in scenario names or workflow files
    policies: tuple[str, ...]  # registry names
    rounds: int = 20  # rounds per run
    repeats: int = 5  # executions per round (median)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # one run per seed
    # where the runs execute (seed 0: each run's noise is seeded by run_loop); None: the simulator in the
    # world the workflow files' world: keys name, else a5500 (testbeds.world.choose_world)
    testbed: TestbedSpec | None = None
    cards: str | None = None  # rebind every workflow to this card set (name or file)
    policy_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # policy -> make_policy kwargs
    ablation: bool = False  # run the agent's S13 ablation too
    gantt_scenario: str = DEFAULT_GANTT_SCENARIO  # scenario of the all-GPU vs oracle Gantt chart

    @property
    def spec(self) -> TestbedSpec:
        """The testbed spec (the default simulator when none is set and run_bench has not chosen one)."""
        return self.testbed if self.testbed is not None else TestbedSpec()

    @property
    def simulated(self) -> bool:
        return self.spec.simulated

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenarios": list(self.scenarios),
            "policies": list(self.policies),
            "rounds": self.rounds,
            "repeats": self.repeats,
            "seeds": list(self.seeds),
            "testbed": self.spec.to_dict(),
            "cards": self.cards,
            "policy_options": {p: redact_options(jsonable(o)) for p, o in self.policy_options.items()},
            "equivalence_tolerance": EQUIVALENCE_TOLERANCE,
            "ablation": self.ablation,
            "gantt_scenario": self.gantt_scenario,
        }


@dataclass(frozen=True)
class BenchRecord:
    """One (scenario, policy, seed) run and its metrics."""

    scenario: str  # workflow name
    policy: str  # registry name
    online: bool  # False for the oracle reference
    seed: int  # run_loop seed
    run: LoopRun  # every round, with its executions
    metrics: RunMetrics  # the run against the oracle


@dataclass(frozen=True)
class SummaryRow:
    """One (scenario, policy) over its seeds."""

    scenario: str  # workflow name
    policy: str  # registry name
    online: bool  # False for the oracle reference
    seeds: int  # runs aggregated
    tasks: int  # n of the match
    best_match_median: int  # median over seeds of the best oracle match (lower median)
    best_match_min: int  # lowest over seeds
    best_match_max: int  # highest over seeds
    full_match_seeds: int  # seeds whose best match is n/n
    best_match_exact_median: int  # median over seeds of the match against exactly tied mappings only
    best_ratio_mean: float | None  # mean over seeds with a feasible round; None: never feasible
    final_ratio_mean: float | None  # mean over seeds whose last round was feasible
    best_e2e_ms_median: float | None  # median over seeds of the best measured E2E
    first_equivalent_median: int | None  # median round over the seeds that reached equivalence
    first_equivalent_reached: int  # seeds that reached an oracle-equivalent mapping
    executions_mean: float  # executions per run, probes included
    probes_mean: float  # probe executions per run
    infeasible_executions_mean: float  # failed executions per run
    regret_mean: float  # cumulative regret fraction, mean over seeds
    # median over seeds of the noise-free E2E (testbed's ``expected``) of the mapping the run chose (its
    # best round's); None: no seed had a feasible round, or the testbed has no noise-free model
    chosen_e2e_ms_median: float | None = None

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "online": self.online,
            "seeds": self.seeds,
            "tasks": self.tasks,
            "best_match": {"median": self.best_match_median, "min": self.best_match_min, "max": self.best_match_max},
            "full_match_seeds": self.full_match_seeds,
            "best_match_exact_median": self.best_match_exact_median,
            "best_ratio_mean": r(self.best_ratio_mean),
            "final_ratio_mean": r(self.final_ratio_mean),
            "best_e2e_ms_median": r(self.best_e2e_ms_median, 3),
            "first_equivalent_round_median": self.first_equivalent_median,
            "first_equivalent_reached": self.first_equivalent_reached,
            "executions_mean": r(self.executions_mean, 2),
            "probes_mean": r(self.probes_mean, 2),
            "infeasible_executions_mean": r(self.infeasible_executions_mean, 2),
            "regret_mean": r(self.regret_mean, 6),
            "chosen_e2e_ms_median": r(self.chosen_e2e_ms_median, 3),
        }


@dataclass
class BenchResult:
    """Everything one bench produced."""

    config: BenchConfig  # what was asked for
    workflows: dict[str, Workflow]  # scenario -> workflow (after --cards)
    oracles: dict[str, OracleResult]  # scenario -> exhaustive search (noise-free simulator)
    views: dict[str, OracleView]  # scenario -> metrics index of the oracle
    records: list[BenchRecord]  # every run, in scenario, policy, seed order
    notes: list[str]  # skipped parts and why
    ablation: Any = None  # the agent's ablation result (has to_dict/to_markdown), if run
    wall_s: float = 0.0  # time the runs took (outputs excluded)
    # noise-free timelines of the all-GPU and the oracle mapping of config.gantt_scenario (empty: not run)
    gantt: tuple[tuple[str, Execution], ...] = ()
    # (scenario, policy, seed) -> noise-free E2E of the run's chosen (best-round) mapping, None: infeasible
    chosen_e2e_ms: dict[tuple[str, str, int], float | None] = field(default_factory=dict)
    heft_study: Any = None  # experiments.heft_study.HeftStudy when heft or heft-cf ran
    # policy -> its settings (Policy.describe(): e.g. an LLM's model and redacted base URL, never a key)
    policy_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (scenario, policy) -> why that policy did not run on that workflow (too large for it; a note says so too)
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)

    def paper_scenarios(self) -> set[str]:
        """The benched workflows that ARE built-in scenarios (the paper's figures apply to them only)."""
        return {n for n, wf in self.workflows.items() if is_paper_scenario(wf, self.config.cards)}

    def summary(self) -> list[SummaryRow]:
        rows = []
        for sc in self.workflows:
            for pol in self.config.policies:
                recs = [r for r in self.records if r.scenario == sc and r.policy == pol]
                if recs:
                    chosen = [self.chosen_e2e_ms.get((r.scenario, r.policy, r.seed)) for r in recs]
                    ok = [x for x in chosen if x is not None]
                    rows.append(replace(summarize(recs), chosen_e2e_ms_median=statistics.median(ok) if ok else None))
        return rows


def _median_low(xs: Sequence[float]) -> float:
    return statistics.median_low(xs)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(recs: Sequence[BenchRecord]) -> SummaryRow:
    """Aggregate the seeds of one (scenario, policy)."""
    ms = [r.metrics for r in recs]
    matches = [m.best_match for m in ms]
    firsts = [m.first_equivalent_round for m in ms if m.first_equivalent_round is not None]
    best_e2e = [m.best_e2e_ms for m in ms if m.best_e2e_ms is not None]
    n = ms[0].tasks
    return SummaryRow(
        scenario=recs[0].scenario,
        policy=recs[0].policy,
        online=recs[0].online,
        seeds=len(recs),
        tasks=n,
        best_match_median=int(_median_low(matches)),
        best_match_min=min(matches),
        best_match_max=max(matches),
        full_match_seeds=sum(1 for x in matches if x == n),
        best_match_exact_median=int(_median_low([m.best_match_exact for m in ms])),
        best_ratio_mean=_mean([m.best_ratio for m in ms if m.best_ratio is not None]),
        final_ratio_mean=_mean([m.final_ratio for m in ms if m.final_ratio is not None]),
        best_e2e_ms_median=statistics.median(best_e2e) if best_e2e else None,
        first_equivalent_median=int(_median_low(firsts)) if firsts else None,
        first_equivalent_reached=len(firsts),
        executions_mean=sum(m.executions for m in ms) / len(ms),
        probes_mean=sum(m.probes for m in ms) / len(ms),
        infeasible_executions_mean=sum(m.infeasible_executions for m in ms) / len(ms),
        regret_mean=sum(m.regret for m in ms) / len(ms),
    )
