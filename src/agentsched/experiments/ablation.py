"""The monitor ablation (the paper's Table 6, on S13): switch one mechanism off at a time.

Each variant runs the agent on the simulated testbed (a ``TestbedSpec`` of kind sim; default noise
unless the spec says otherwise) for several seeds. The
noise-free brute-force oracle is computed here for scoring only; it is never given to the policy.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from agentsched.agent.policy import AgentPolicy
from agentsched.errors import AgentschedError
from agentsched.experiments.harness import run_scored, scoring_view
from agentsched.experiments.journal import RunJournal, journaled
from agentsched.experiments.paper import ABLATION_SCENARIO as PAPER_SCENARIO
from agentsched.experiments.paper import is_paper_scenario, paper_table6
from agentsched.loop.metrics import EQUIVALENCE_TOLERANCE, RunMetrics
from agentsched.model.mapping import format_mapping
from agentsched.model.options import INITIALS
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.testbeds.spec import TestbedSpec, as_spec


@dataclass(frozen=True)
class Variant:
    """One row of Table 6."""

    key: str  # row key in paper_tables.json table6_S13_ablation
    label: str  # row label in reports
    monitor: dict[str, Any]  # MonitorConfig switches for this variant


VARIANTS: tuple[Variant, ...] = (
    Variant("full_system", "full system", {}),
    Variant("without_cpu_to_queue_reprobe", "w/o cpu-to-queue reprobe", {"cpu_to_queue_reprobe": False}),
    Variant("without_swap_reprobe", "w/o swap reprobe", {"swap_reprobe": False}),
    Variant("without_exploration_hints", "w/o exploration hints", {"hints": False}),
    Variant("llm_only_no_monitor", "reasoner only, no monitor", {"enabled": False}),
)


@dataclass(frozen=True)
class VariantResult:
    """One variant over all seeds."""

    variant: Variant  # which mechanism is off
    policy: str  # the policy label, e.g. agent-rules[no-swap]
    metrics: tuple[RunMetrics, ...]  # one per seed, in seed order
    best_mappings: tuple[str | None, ...]  # each seed's best round mapping (None: no feasible round)

    @property
    def tasks(self) -> int:
        return self.metrics[0].tasks

    @property
    def best_match_min(self) -> int:
        return min(m.best_match for m in self.metrics)

    @property
    def full_match_seeds(self) -> int:
        return sum(1 for m in self.metrics if m.best_match == m.tasks)

    @property
    def equivalent_seeds(self) -> int:
        """Seeds whose best round is oracle-equivalent (reference E2E within 2% of the oracle)."""
        return sum(
            1 for m in self.metrics if m.best_ratio is not None and m.best_ratio <= 1 + EQUIVALENCE_TOLERANCE + 1e-9
        )

    @property
    def best_e2e_ms(self) -> float | None:
        """Mean over seeds of the best round's measured E2E; None when some seed never ran feasibly."""
        xs = [m.best_e2e_ms for m in self.metrics]
        return None if any(x is None for x in xs) else statistics.fmean(xs)  # type: ignore[arg-type]

    @property
    def first_round_median(self) -> float | None:
        xs = [m.first_equivalent_round for m in self.metrics if m.first_equivalent_round is not None]
        return statistics.median(xs) if xs else None

    @property
    def executions_mean(self) -> float:
        return statistics.fmean(m.executions for m in self.metrics)

    def to_dict(self) -> dict[str, Any]:
        e2e = self.best_e2e_ms
        return {
            "variant": self.variant.key,
            "label": self.variant.label,
            "policy": self.policy,
            "monitor": self.variant.monitor,
            "best_match_min": self.best_match_min,
            "full_match_seeds": self.full_match_seeds,
            "equivalent_seeds": self.equivalent_seeds,
            "best_e2e_ms_mean": None if e2e is None else round(e2e, 3),
            "first_equivalent_round_median": self.first_round_median,
            "executions_mean": round(self.executions_mean, 3),
            "runs": [{**m.to_dict(), "best_mapping": b} for m, b in zip(self.metrics, self.best_mappings, strict=True)],
        }


@dataclass(frozen=True)
class AblationTable:
    """Table 6 from one round-0 rule."""

    initial: str  # "rules" (the written rules) or "all-gpu" (no prior: what the monitor alone recovers)
    variants: tuple[VariantResult, ...]  # in Table 6 order

    def to_dict(self) -> dict[str, Any]:
        return {"initial": self.initial, "variants": [v.to_dict() for v in self.variants]}


@dataclass(frozen=True)
class AblationResult:
    """Table 6 as measured here: one table per round-0 rule."""

    workflow: str  # workflow name
    start: str  # warm or cold
    reasoner: str  # rules (the deterministic reasoner)
    rounds: int  # rounds per run
    repeats: int  # executions per round
    seeds: tuple[int, ...]  # one run per seed
    oracle_mapping: str  # noise-free brute-force best (scoring only)
    oracle_e2e_ms: float  # its E2E
    tables: tuple[AblationTable, ...]  # one per round-0 rule, in the order asked
    paper: dict[str, list[Any]]  # paper rows by variant key; empty unless the workflow is S13
    world: str = "a5500"  # the simulated world (GPU contention) the runs used

    @property
    def variants(self) -> tuple[VariantResult, ...]:
        """The first table's rows."""
        return self.tables[0].variants

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "start": self.start,
            "reasoner": self.reasoner,
            "rounds": self.rounds,
            "repeats": self.repeats,
            "seeds": list(self.seeds),
            "oracle": {"mapping": self.oracle_mapping, "e2e_ms": round(self.oracle_e2e_ms, 3)},
            "tables": [t.to_dict() for t in self.tables],
            "paper": self.paper,
            "world": self.world,
        }

    def to_markdown(self) -> str:
        n = len(self.seeds)
        lines = [
            f"Ablation on {self.workflow} ({self.start} start, agent-{self.reasoner}, {plural(self.rounds, 'round')} x "
            f"{plural(self.repeats, 'run')}, {plural(n, 'seed')}, world {self.world}; oracle {self.oracle_mapping} at "
            f"{self.oracle_e2e_ms:.0f} ms, noise-free, scoring only)",
        ]
        with_paper = bool(self.paper)  # the paper's figures are for S13 only
        head = [
            "variant",
            "best match (fewest over seeds)",
            f"seeds at {self.variants[0].tasks}/{self.variants[0].tasks}",
            "seeds oracle-equiv.",
            "best E2E ms (mean)",
            "first equiv. round (median)",
            "executions (mean)",
        ]
        if with_paper:
            head += ["paper best match", "paper best E2E ms"]
        for table in self.tables:
            lines += [
                "",
                "Round 0 by the written rules:"
                if table.initial == "rules"
                else "Round 0 without a prior (every task on gpu_now), so the evidence alone must find the mapping:",
                "",
                "| " + " | ".join(head) + " |",
                "|" + "|".join("---" for _ in head) + "|",
            ]
            for v in table.variants:
                e2e = v.best_e2e_ms
                first = v.first_round_median
                cells = [
                    v.variant.label,
                    f"{v.best_match_min}/{v.tasks}",
                    f"{v.full_match_seeds}/{n}",
                    f"{v.equivalent_seeds}/{n}",
                    "OOM" if e2e is None else f"{e2e:.0f}",
                    "never" if first is None else f"R{first:g}",
                    f"{v.executions_mean:.0f}",
                ]
                if with_paper:
                    cells += [str(x) for x in self.paper.get(v.variant.key, ["-", "-"])]
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        paper_note = (
            "Paper: Table 6 (its LLM reasoner)."
            if with_paper
            else f"Paper: Table 6 ablates {PAPER_SCENARIO} only; no paper figures for {self.workflow}."
        )
        lines.append(
            "best match: the fewest tasks placed as in the oracle by any seed's best feasible round "
            f"(0 when no round was feasible). {paper_note}"
        )
        return "\n".join(lines) + "\n"


def run_ablation(
    workflow: Workflow,
    *,
    rounds: int = 20,
    repeats: int = 5,
    seeds: tuple[int, ...] | list[int] = (0, 1, 2, 3, 4),
    start: str = "warm",
    initial: str | tuple[str, ...] = INITIALS,
    variants: tuple[Variant, ...] = VARIANTS,
    paper: bool | None = None,
    journal: RunJournal | None = None,
    testbed: TestbedSpec | None = None,
) -> AblationResult:
    """Run every variant for every seed on the simulated ``testbed`` (default: ``TestbedSpec()``, the
    calibrated a5500 world with default noise; each run's testbed takes the run's seed), from each
    round-0 rule in ``initial`` (by default both: with the rules' prior, and without one).
    ``journal``: record each finished run as it completes and reuse the runs it holds (``--resume``)."""
    spec = as_spec(testbed)
    if not spec.simulated:
        raise AgentschedError(f"the ablation runs on the sim testbed (got {spec.kind.value})")
    world = spec.world_name
    seeds = tuple(seeds)
    if not seeds:
        raise AgentschedError("the ablation needs at least one seed")
    if paper is None:  # the paper's Table 6 columns: only for the built-in S13 itself
        paper = workflow.name == PAPER_SCENARIO and is_paper_scenario(workflow)
    initials = (initial,) if isinstance(initial, str) else tuple(initial)
    bad = [i for i in initials if i not in INITIALS]
    if bad or not initials:
        raise AgentschedError(f"ablation initial must be among {', '.join(INITIALS)}, got {', '.join(bad) or 'none'}")
    try:
        oracle, view = scoring_view(workflow, spec.build())  # scoring only: never given to the policy
    except AgentschedError as e:
        raise AgentschedError(f"workflow {workflow.name}: {e}") from None
    tables = []
    for init in initials:
        results = []
        for v in variants:
            metrics, bests = [], []
            label = ""
            for seed in seeds:

                def one(v: Variant = v, seed: int = seed, init: str = init) -> tuple[str, RunMetrics, str | None]:
                    policy = AgentPolicy("rules", start=start, monitor=v.monitor, initial=init)
                    scored = run_scored(
                        workflow,
                        policy,
                        spec.replace(seed=seed).build(),
                        view,
                        rounds=rounds,
                        repeats=repeats,
                        seed=seed,
                    )
                    m = scored.metrics
                    best = scored.run.rounds[m.best_round].mapping if m.best_round is not None else None
                    return scored.run.policy, m, None if best is None else format_mapping(workflow, best)

                key = f"ablation|{workflow.name}|{world}|{start}|{rounds}x{repeats}|{init}|{v.key}|{seed}"
                label, m, best_text = journaled(journal, key, one, tuple[str, RunMetrics, str | None])
                metrics.append(m)
                bests.append(best_text)
            results.append(VariantResult(v, label, tuple(metrics), tuple(bests)))
        tables.append(AblationTable(init, tuple(results)))
    best = oracle.best
    assert best.e2e_ms is not None
    return AblationResult(
        workflow=workflow.name,
        start=start,
        reasoner="rules",
        rounds=rounds,
        repeats=repeats,
        seeds=seeds,
        oracle_mapping=format_mapping(workflow, best.mapping),
        oracle_e2e_ms=best.e2e_ms,
        tables=tuple(tables),
        paper=paper_table6() if paper else {},
        world=str(world),
    )
