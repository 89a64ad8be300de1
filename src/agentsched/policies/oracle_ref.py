"""Oracle reference: the brute-force best mapping, proposed every round.

Source: the paper's oracle (Lu & Reda, arXiv:2607.22242, Table 3): "the feasible mapping with the
lowest measured median E2E under exhaustive search in the same environment".

NOT an online policy (``online = False``): it knows the answer before round 0, and it is the only
policy module allowed to look at the brute-force oracle. Reports label it as a reference line.
By default it searches the noise-free simulator with the workflow's cards; a harness that already
has the oracle (``agentsched.oracle.brute_force`` on its own testbed) passes it as ``oracle=``.
"""

from __future__ import annotations

from agentsched.oracle import OracleResult, brute_force
from agentsched.policies.base import Policy, PolicyContext, Proposal
from agentsched.testbeds.sim import SimTestbed


class OracleRefPolicy(Policy):
    """Proposes the oracle's best mapping in every round (offline reference)."""

    name = "oracle"
    online = False

    def __init__(self, *, oracle: OracleResult | None = None) -> None:
        self.given = oracle  # precomputed oracle for this workflow, or None to compute one

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        res = self.given
        if res is None or res.workflow != ctx.workflow.name:
            res = brute_force(ctx.workflow, SimTestbed(noise_sigma=0.0, seed=None))
        self.best = res.best

    def propose(self, round_index: int) -> Proposal:
        return Proposal(dict(self.best.mapping), {"oracle_e2e_ms": round(self.best.e2e_ms or 0.0, 3)})
