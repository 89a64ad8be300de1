"""Does agent-rules reach an oracle-equivalent mapping? Runs it (warm and cold) and a baseline
(UCB1) on built-in scenarios with the simulated testbed, and scores each run against the
noise-free brute-force oracle. The oracle is computed here for scoring only; no policy sees it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from agentsched.agent.policy import AgentPolicy
from agentsched.errors import AgentschedError
from agentsched.experiments.harness import run_scored, scoring_view
from agentsched.experiments.paper import paper_first_match_rounds
from agentsched.loop.registry import is_available, make_policy
from agentsched.model.options import STARTS
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.policies.base import Policy
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import World, load_world


@dataclass(frozen=True)
class CheckRun:
    """One (scenario, policy, seed) run, scored."""

    seed: int  # testbed and policy seed
    first_round: int | None  # first oracle-equivalent round (None: never)
    executions_to_first: int | None  # executions up to and including that round's runs (probes included)
    executions: int  # every execution of the run, probes included
    probes: int  # of which monitor probes
    final_equivalent: bool  # the last round's mapping is oracle-equivalent (it stayed there)
    best_match: int  # best oracle match over feasible rounds


@dataclass(frozen=True)
class CheckRow:
    """One scenario x policy over all seeds."""

    scenario: str  # workflow name
    policy: str  # policy label, e.g. agent-rules-cold
    runs: tuple[CheckRun, ...]  # one per seed

    @property
    def hit(self) -> int:
        """Seeds that proposed an oracle-equivalent mapping in some round."""
        return sum(1 for r in self.runs if r.first_round is not None)

    @property
    def reached(self) -> int:
        """Seeds that reached an oracle-equivalent mapping and ended on one."""
        return sum(1 for r in self.runs if r.first_round is not None and r.final_equivalent)

    def _median(self, xs: list[int | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return statistics.median(vals) if vals else None

    @property
    def first_round_median(self) -> float | None:
        return self._median([r.first_round for r in self.runs])

    @property
    def executions_to_first_median(self) -> float | None:
        return self._median([r.executions_to_first for r in self.runs])

    @property
    def executions_median(self) -> float:
        return statistics.median(r.executions for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "hit": self.hit,
            "reached": self.reached,
            "first_round_median": self.first_round_median,
            "executions_to_first_median": self.executions_to_first_median,
            "executions_median": self.executions_median,
            "runs": [r.__dict__ for r in self.runs],
        }


@dataclass(frozen=True)
class CheckResult:
    rounds: int  # rounds per run
    repeats: int  # executions per round
    seeds: tuple[int, ...]  # seeds run
    rows: tuple[CheckRow, ...]  # scenario-major
    notes: tuple[str, ...]  # e.g. a baseline that is not available
    world: str = "a5500"  # the simulated world (GPU contention) the runs used

    @property
    def all_reached(self) -> bool:
        return all(r.reached == len(r.runs) for r in self.rows if r.policy.startswith("agent-"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "repeats": self.repeats,
            "seeds": list(self.seeds),
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
            "all_reached": self.all_reached,
            "world": self.world,
        }

    def to_markdown(self) -> str:
        paper = paper_first_match_rounds()
        n = len(self.seeds)
        policies = list(dict.fromkeys(r.policy for r in self.rows))
        scenarios = list(dict.fromkeys(r.scenario for r in self.rows))
        by = {(r.scenario, r.policy): r for r in self.rows}
        head = ["scenario"]
        for p in policies:
            head += [f"{p} hit (ended on it)", f"{p} first round", f"{p} executions to first / total"]
        head.append("paper first round")
        lines = [
            f"Oracle-equivalent mapping (within 2% of the noise-free oracle), {plural(self.rounds, 'round')} x "
            f"{plural(self.repeats, 'run')}, {plural(n, 'seed')}, world {self.world} (medians over seeds; executions include probes)",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" for _ in head) + "|",
        ]
        for s in scenarios:
            cells = [s]
            for p in policies:
                r = by.get((s, p))
                if r is None:
                    cells += ["-", "-", "-"]
                    continue
                first = r.first_round_median
                to_first = r.executions_to_first_median
                cells += [
                    f"{r.hit}/{n} ({r.reached}/{n})",
                    "never" if first is None else f"R{first:g}",
                    f"{'-' if to_first is None else f'{to_first:g}'} / {r.executions_median:g}",
                ]
            cells.append(f"R{paper[s]}" if s in paper else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            "hit: seeds that proposed an oracle-equivalent mapping in some round; in brackets, those whose "
            "last round was one too. "
            "Paper first rounds are Table 5's first full match (the paper reports R0 for S1-S10 "
            "with profile cards, Table 4 note).",
        ]
        lines += [f"note: {x}" for x in self.notes]
        return "\n".join(lines) + "\n"


def _baseline(name: str) -> Policy | None:
    if not is_available(name):
        return None
    return make_policy(name)


def run_check(
    workflows: list[Workflow],
    *,
    starts: tuple[str, ...] = STARTS,
    seeds: tuple[int, ...] = (0, 1, 2),
    rounds: int = 20,
    repeats: int = 5,
    baselines: tuple[str, ...] = ("ucb1",),
    world: str | World | None = None,
) -> CheckResult:
    """Run agent-rules (each start) and the baselines on each workflow in the simulated ``world``
    (default: the calibrated a5500), scored against its noise-free oracle."""
    world = load_world(world)
    if not seeds:
        raise AgentschedError("the check needs at least one seed")
    rows: list[CheckRow] = []
    notes: list[str] = []
    for wf in workflows:
        _, view = scoring_view(wf, SimTestbed(world=world))  # scoring only
        makers: list[tuple[str, Any]] = [(f"agent-{s}", lambda s=s: AgentPolicy("rules", start=s)) for s in starts]
        makers += [(b, lambda b=b: _baseline(b)) for b in baselines]
        for key, make in makers:
            runs = []
            label = key
            for seed in seeds:
                policy = make()
                if policy is None:
                    note = f"baseline {key} is not available"
                    if note not in notes:
                        notes.append(note)
                    break
                scored = run_scored(
                    wf, policy, SimTestbed(seed=seed, world=world), view, rounds=rounds, repeats=repeats, seed=seed
                )
                run, m = scored.run, scored.metrics
                label = run.policy
                first = m.first_equivalent_round
                runs.append(
                    CheckRun(
                        seed=seed,
                        first_round=first,
                        executions_to_first=None if first is None else run.records[first].result.executions_total,
                        executions=m.executions,
                        probes=m.probes,
                        final_equivalent=view.equivalent(run.rounds[-1].mapping),
                        best_match=m.best_match,
                    )
                )
            if runs:
                rows.append(CheckRow(wf.name, label, tuple(runs)))
    return CheckResult(rounds, repeats, tuple(seeds), tuple(rows), tuple(notes), world=world.name)
