"""The one experiment harness: score a policy's run of the one run loop against an oracle.

Bench, ablation and agent-check all call ``scoring_view`` once per workflow and ``run_scored`` once
per (policy, seed); the oracle is for scoring only and never reaches a policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsched.loop.metrics import OracleView, RunMetrics, oracle_view, run_metrics
from agentsched.loop.runner import LoopRun, reference_oracle, run_loop
from agentsched.model.workflow import Workflow
from agentsched.oracle import OracleResult
from agentsched.policies.base import Policy
from agentsched.testbeds.base import Testbed


@dataclass(frozen=True)
class ScoredRun:
    """One (workflow, policy, seed) run and its metrics against the scoring oracle."""

    run: LoopRun  # every round, probe and proposal
    metrics: RunMetrics  # scored against the oracle view


def scoring_view(
    workflow: Workflow, testbed: Testbed, *, repeats: int = 5, cache: dict[tuple[str, str], OracleResult] | None = None
) -> tuple[OracleResult, OracleView]:
    """The scoring oracle of ``workflow`` (``loop.runner.reference_oracle``) and its index."""
    res = reference_oracle(workflow, testbed, repeats=repeats, cache=cache)
    return res, oracle_view(workflow, res)


def run_scored(
    workflow: Workflow, policy: Policy, testbed: Testbed, view: OracleView, *, rounds: int, repeats: int, seed: int
) -> ScoredRun:
    """Run ``policy`` through ``run_loop`` and score the run against ``view``."""
    run = run_loop(workflow, policy, testbed, rounds=rounds, repeats=repeats, seed=seed)
    return ScoredRun(run, run_metrics(run, view))
