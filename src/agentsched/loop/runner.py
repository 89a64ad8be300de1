"""The closed scheduling loop: propose -> execute R times -> median -> observe, for N rounds.

Every execution is counted, including the probes a policy (its monitor) asks for, so exploration
cost is visible in ``executions_total`` and in the regret.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies.base import MappingT, Policy, PolicyContext, Proposal, RoundResult
from agentsched.testbeds.base import Testbed


@dataclass
class RoundRecord:
    """A round plus what the policy said about it."""

    result: RoundResult  # the measured round
    probes: tuple[Execution, ...]  # probe executions the policy ran after observing it
    proposal_info: dict[str, Any]  # what the policy recorded with its proposal (prompts, reasons)
    evidence: dict[str, Any] | None  # what observe() returned (monitor evidence)


@dataclass
class LoopRun:
    """A whole run of one policy on one workflow."""

    workflow: Workflow
    policy: str  # policy label
    online: bool  # False for offline references
    seed: int
    repeats: int
    records: list[RoundRecord] = field(default_factory=list)

    @property
    def rounds(self) -> list[RoundResult]:
        return [r.result for r in self.records]

    @property
    def executions_total(self) -> int:
        return self.records[-1].result.executions_total + len(self.records[-1].probes) if self.records else 0

    def all_executions(self) -> list[Execution]:
        """Every execution in the order it happened (round runs, then that round's probes)."""
        out: list[Execution] = []
        for r in self.records:
            out.extend(r.result.executions)
            out.extend(r.probes)
        return out

    def best_round(self) -> RoundResult | None:
        ok = [r for r in self.rounds if r.e2e_ms is not None]
        return min(ok, key=lambda r: r.e2e_ms) if ok else None  # type: ignore[arg-type,return-value]


def summarize_runs(workflow: Workflow, mapping: MappingT, execs: list[Execution], round_index: int,
                   executions_total: int) -> RoundResult:
    """Fold R executions of one mapping into a round (median E2E; infeasible if any run failed)."""
    bad = next((x for x in execs if not x.ok), None)
    elapsed = statistics.median(x.elapsed_ms for x in execs)
    peak = max(x.peak_vram_mb for x in execs)
    if bad is not None:
        return RoundResult(round_index, mapping, bad.status, None, elapsed, peak, tuple(execs),
                           executions_total, bad.message)
    e2e = statistics.median(x.e2e_ms for x in execs)  # type: ignore[misc]
    return RoundResult(round_index, mapping, Status.OK, e2e, elapsed, peak, tuple(execs), executions_total)


def run_loop(
    workflow: Workflow,
    policy: Policy,
    testbed: Testbed,
    *,
    rounds: int = 20,
    repeats: int = 5,
    seed: int = 0,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> LoopRun:
    """Run ``policy`` for ``rounds`` rounds of ``repeats`` executions each on ``testbed``.

    The testbed's noise and the policy's randomness draw from two generators seeded from ``seed``,
    so runs are reproducible and policies cannot perturb each other's noise stream.
    """
    if rounds < 1:
        raise AgentschedError(f"rounds must be >= 1, got {rounds}")
    if repeats < 1:
        raise AgentschedError(f"repeats must be >= 1, got {repeats}")
    noise_rng = random.Random(f"noise:{seed}")
    policy_rng = random.Random(f"policy:{seed}")
    counter = {"n": 0}
    pending_probes: list[Execution] = []

    def probe(mapping: MappingT) -> Execution:
        m = validate_mapping(workflow, mapping)
        x = testbed.run(workflow, m, rng=noise_rng)
        counter["n"] += 1
        pending_probes.append(x)
        return x

    ctx = PolicyContext(workflow=workflow, cards=dict(workflow.task_cards), rng=policy_rng,
                        probe=probe, rounds=rounds, repeats=repeats)
    policy.reset(ctx)
    run = LoopRun(workflow, policy.label, policy.online, seed, repeats)
    for i in range(rounds):
        proposal = policy.propose(i)
        if not isinstance(proposal, Proposal):
            proposal = Proposal(dict(proposal))
        mapping: dict[str, Mode] = validate_mapping(workflow, proposal.mapping)
        execs = [testbed.run(workflow, mapping, rng=noise_rng) for _ in range(repeats)]
        counter["n"] += len(execs)
        result = summarize_runs(workflow, mapping, execs, i, counter["n"])
        pending_probes.clear()
        evidence = policy.observe(result)
        record = RoundRecord(result, tuple(pending_probes), dict(proposal.info), evidence)
        pending_probes.clear()
        run.records.append(record)
        if on_round is not None:
            on_round(record)
    return run
