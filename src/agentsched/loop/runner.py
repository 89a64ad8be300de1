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

from agentsched.errors import AgentschedError, MappingError, PolicyError, TestbedError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult, brute_force
from agentsched.policies.base import MappingT, Policy, PolicyContext, Proposal, RoundResult
from agentsched.testbeds.base import Testbed


@dataclass
class RoundRecord:
    """A round plus what the policy said about it."""

    result: RoundResult  # the measured round
    # probe executions the policy ran for this round: while proposing it (before its runs; for
    # round 0 also during reset) and while observing it (after its runs)
    probes: tuple[Execution, ...]
    proposal_info: dict[str, Any]  # what the policy recorded with its proposal (prompts, reasons)
    evidence: dict[str, Any] | None  # what observe() returned (monitor evidence)
    executions_after: int = 0  # executions so far once the round is observed (its probes included)


@dataclass
class LoopRun:
    """A whole run of one policy on one workflow."""

    workflow: Workflow  # what ran
    policy: str  # policy label
    online: bool  # False for offline references
    seed: int  # seed of the noise and policy generators
    repeats: int  # executions per round
    records: list[RoundRecord] = field(default_factory=list)  # one per round, in order

    @property
    def rounds(self) -> list[RoundResult]:
        return [r.result for r in self.records]

    @property
    def executions_total(self) -> int:
        """Every execution of the run: round runs and probes."""
        return self.records[-1].executions_after if self.records else 0

    @property
    def probes_total(self) -> int:
        return sum(len(r.probes) for r in self.records)

    def all_executions(self) -> list[Execution]:
        """Every execution of the run, round runs and probes (each round's runs, then its probes)."""
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


def noise_stream(seed: int) -> random.Random:
    """The testbed-noise generator of ``--seed S``. One meaning of a seed everywhere: S derives two
    independent streams, the testbed's noise ("noise:S") and the policy's choices ("policy:S"), so a
    policy's randomness can never shift the noise another policy sees; ``--seeds N`` runs S = 0..N-1."""
    return random.Random(f"noise:{seed}")


def policy_stream(seed: int) -> random.Random:
    """The policy generator of ``--seed S`` (see ``noise_stream``)."""
    return random.Random(f"policy:{seed}")


def run_loop(
    workflow: Workflow,
    policy: Policy,
    testbed: Testbed,
    *,
    rounds: int = 20,
    repeats: int = 5,
    seed: int = 0,
    on_round: Callable[[RoundRecord], None] | None = None,
    probe_allowed: Callable[[], bool] | None = None,
) -> LoopRun:
    """Run ``policy`` for ``rounds`` rounds of ``repeats`` executions each on ``testbed``.

    The testbed's noise and the policy's randomness draw from two generators seeded from ``seed``,
    so runs are reproducible and policies cannot perturb each other's noise stream.
    ``probe_allowed`` (optional) is asked before each probe a policy's monitor wants to run.
    """
    if rounds < 1:
        raise AgentschedError(f"rounds must be >= 1, got {rounds}")
    if repeats < 1:
        raise AgentschedError(f"repeats must be >= 1, got {repeats}")
    noise_rng = noise_stream(seed)
    policy_rng = policy_stream(seed)
    counter = {"n": 0}
    pending_probes: list[Execution] = []

    def probe(mapping: MappingT) -> Execution:
        m = validate_mapping(workflow, mapping)
        x = testbed.run(workflow, m, rng=noise_rng)
        counter["n"] += 1
        pending_probes.append(x)
        return x

    ctx = PolicyContext(workflow=workflow, cards=dict(workflow.task_cards), rng=policy_rng,
                        probe=probe, rounds=rounds, repeats=repeats, probe_allowed=probe_allowed)
    testbed.begin_round(0)  # round 0 begins with the policy's reset: its probes belong to it
    policy.reset(ctx)
    run = LoopRun(workflow, policy.label, policy.online, seed, repeats)
    for i in range(rounds):
        if i > 0:
            testbed.begin_round(i)  # before the round's probes (propose) and runs
        proposal = policy.propose(i)
        if not isinstance(proposal, Proposal):
            proposal = Proposal(dict(proposal))
        try:
            mapping: dict[str, Mode] = validate_mapping(workflow, proposal.mapping)
        except MappingError as e:
            raise PolicyError(f"policy {policy.label} proposed an invalid mapping in round {i}: {e}") from None
        execs = [testbed.run(workflow, mapping, rng=noise_rng) for _ in range(repeats)]
        counter["n"] += len(execs)
        result = summarize_runs(workflow, mapping, execs, i, counter["n"])
        evidence = policy.observe(result)
        # probes from reset/propose (before the runs) and from observe (after) all belong here
        record = RoundRecord(result, tuple(pending_probes), dict(proposal.info), evidence, counter["n"])
        pending_probes.clear()
        run.records.append(record)
        if on_round is not None:
            on_round(record)
    return run


def reference_oracle(workflow: Workflow, testbed: Testbed, *, repeats: int = 5,
                     cache: dict[tuple[str, str], OracleResult] | None = None) -> OracleResult:
    """The oracle the metrics compare against: exhaustive search over the testbed's noise-free
    ``expected`` executions when it has them (the simulator: one exact run per mapping), else on
    the testbed itself with ``repeats`` runs per mapping (the paper's "same environment"). Cached per workflow and
    card set in ``cache`` when given. Raises a one-line ``AgentschedError`` ("no oracle for NAME: ...")
    when the workflow is too large to enumerate or has no feasible mapping; a ``TestbedError`` (the
    testbed cannot run a mapping at all, e.g. a GPU placement without CUDA) passes through as is."""
    key = (workflow.name, workflow.card_set.name)
    if cache is not None and key in cache:
        return cache[key]
    try:  # brute_force takes the testbed's expected() execution where it has one (the simulator)
        res = brute_force(workflow, testbed, repeats=repeats, rng=random.Random(f"oracle:{workflow.name}"))
    except TestbedError:
        raise
    except (AgentschedError, ValueError) as e:
        raise AgentschedError(f"no oracle for {workflow.name}: {e}") from None
    if not res.feasible:
        raise AgentschedError(f"no oracle for {workflow.name}: no feasible mapping")
    if cache is not None:
        cache[key] = res
    return res
