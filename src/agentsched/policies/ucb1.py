"""UCB1 over complete mappings as arms.

Source: P. Auer, N. Cesa-Bianchi, P. Fischer, "Finite-time analysis of the multiarmed bandit
problem", Machine Learning 47, 2002 (policy UCB1).

Arms: every mapping of the decision space except those the cards prove infeasible (a GPU task
larger than the budget, or ``gpu_now`` sources whose VRAM sum exceeds it; see
``certainly_infeasible``); 2^4 = 16 in the binary scenarios, at most 3^4 = 81 in three-way ones.
One round is one pull. Reward in [0, 1]: ``LB / E2E`` with LB the cards' lower bound on any
mapping's E2E (each task at its faster isolated device, no load, no contention), so a faster
round earns more and the scale never changes; an infeasible round earns 0. A round with nothing
to judge (every run failed in host code: ``RoundResult.judged``) is no pull at all.

Play: first every arm once, in an order shuffled with ``ctx.rng`` (so which mapping comes first
is not biased by enumeration order), then the arm maximising
``mean reward + sqrt(exploration * ln(plays) / arm plays)`` (UCB1 has exploration = 2); ties are
broken with ``ctx.rng``. With 16 arms and 20 rounds it explores for 16 rounds and exploits for 4;
with 81 arms it never leaves the first phase: exploration cost is the point of this baseline.

Arm cap: the arms are held in memory, so a workflow whose decision space has more than
``MAX_ARMS`` (4096) mappings (e.g. 3^8 = 6561, or 3^16 for a 16-task three-way workflow) is
refused by ``check_workflow`` (the preflight, and ``reset`` again) with a one-line ``PolicyError``
naming the count and the cap; a bench skips ucb1 on that workflow alone. The count (modes^tasks) is
checked before anything is enumerated.
"""

from __future__ import annotations

import math

from agentsched.errors import PolicyError
from agentsched.model.mapping import enumerate_mappings, mapping_key
from agentsched.model.workflow import Workflow
from agentsched.policies._common import certainly_infeasible, lower_bound_ms
from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult

MAX_ARMS = 4096  # most mappings UCB1 holds as arms (2^12 binary, 3^7 = 2187 three-way)


class Ucb1Policy(Policy):
    """UCB1 (Auer et al. 2002) with complete feasible mappings as arms."""

    name = "ucb1"

    def __init__(self, *, exploration: float = 2.0) -> None:
        if (
            isinstance(exploration, bool)
            or not isinstance(exploration, (int, float))
            or not math.isfinite(exploration)
            or exploration < 0
        ):
            raise PolicyError(f"policy {self.name}: exploration must be a finite number >= 0, got {exploration!r}")
        self.exploration = float(exploration)  # the constant under the square root (2 in UCB1)

    def check_workflow(self, workflow: Workflow) -> None:
        """The arm cap: one-line ``PolicyError`` when ``workflow`` has more than ``MAX_ARMS`` mappings."""
        k, n = len(workflow.decision_space.modes), len(workflow.task_ids)
        if k**n > MAX_ARMS:  # 3^10000 has 4,772 digits: an order of magnitude is the line
            count = f"{k**n}" if n <= 40 else f"about 10^{n * math.log10(k):,.0f}"
            raise PolicyError(
                f"policy ucb1: {workflow.name} has {count} mappings ({k}^{n}), over the arm cap of "
                f"{MAX_ARMS}; use a policy that does not enumerate mappings"
            )

    def reset(self, ctx: PolicyContext) -> None:
        self.check_workflow(ctx.workflow)  # also for callers that skip the preflight
        super().reset(ctx)
        wf = ctx.workflow
        self.arms = [m for m in enumerate_mappings(wf) if not certainly_infeasible(wf, ctx.cards, m)]
        if not self.arms:
            raise PolicyError(f"policy ucb1: every mapping of {wf.name} is certainly infeasible")
        self.arm_of = {mapping_key(wf, m): i for i, m in enumerate(self.arms)}
        self.plays = [0] * len(self.arms)  # pulls per arm
        self.reward_sum = [0.0] * len(self.arms)  # summed rewards per arm
        self.explore_order = list(range(len(self.arms)))
        ctx.rng.shuffle(self.explore_order)
        self.lower_bound_ms = lower_bound_ms(wf, ctx.cards)

    def mean_reward(self, arm: int) -> float:
        return self.reward_sum[arm] / self.plays[arm] if self.plays[arm] else 0.0

    def index(self, arm: int) -> float:
        """UCB1 index of a played arm."""
        total = sum(self.plays)
        return self.mean_reward(arm) + math.sqrt(self.exploration * math.log(total) / self.plays[arm])

    def propose(self, round_index: int) -> Proposal:
        unplayed = [a for a in self.explore_order if self.plays[a] == 0]
        if unplayed:
            arm, phase = unplayed[0], "explore"
        else:
            scores = [self.index(a) for a in range(len(self.arms))]
            top = max(scores)
            arm = self.ctx.rng.choice([a for a, s in enumerate(scores) if s >= top - 1e-12])
            phase = "ucb"
        info = {
            "arm": arm,
            "arms": len(self.arms),
            "phase": phase,
            "plays": self.plays[arm],
            "mean_reward": round(self.mean_reward(arm), 6),
        }
        return Proposal(dict(self.arms[arm]), info)

    def reward(self, result: RoundResult) -> float:
        if result.e2e_ms is None or result.e2e_ms <= 0:
            return 0.0
        return min(1.0, self.lower_bound_ms / result.e2e_ms)  # noise may dip below the bound

    def observe(self, result: RoundResult) -> None:
        if not result.judged:  # every run failed in host code: not a pull (the arm is offered again)
            return None
        arm = self.arm_of[mapping_key(self.ctx.workflow, result.mapping)]
        self.plays[arm] += 1
        self.reward_sum[arm] += self.reward(result)
        return None
