"""Memory-greedy: ``gpu_now`` in decreasing GPU speedup until the VRAM budget is used, then CPU.

Source: the three-way baseline of Lu & Reda, arXiv:2607.22242, Table 5 ("assign tools to gpu_now by
GPU speedup until the budget is exhausted, then fall back to CPU").

Details the paper leaves open, decided here: speedup is the card's cpu_ms / gpu_ms (ties: file
order); tools that gain nothing from the GPU (speedup <= 1, or no GPU implementation) stay on the
CPU; the first tool whose VRAM does not fit beside those already placed ends the greedy pass, and
it and every later tool go to the CPU ("until the budget is exhausted"). The VRAM sum is over all
placed tools, ignoring timing. Without a budget every GPU-faster tool goes to ``gpu_now``. Never
uses ``gpu_queue``. Static: the same mapping every round.
"""

from __future__ import annotations

from agentsched.model.workflow import Mode
from agentsched.policies.base import Policy, PolicyContext, Proposal


class MemGreedyPolicy(Policy):
    """gpu_now by speedup until the budget is used, then cpu."""

    name = "mem-greedy"

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        wf, cards = ctx.workflow, ctx.cards
        index = {t: i for i, t in enumerate(wf.task_ids)}
        gainers = [t for t in wf.task_ids if (cards[t].speedup or 0.0) > 1.0]
        order = sorted(gainers, key=lambda t: (-(cards[t].speedup or 0.0), index[t]))
        budget = wf.vram_budget_mb
        used_mb = 0.0
        self.mapping = {t: Mode.CPU for t in wf.task_ids}
        for t in order:
            need = cards[t].vram_needed_mb
            if budget is not None and used_mb + need > budget + 1e-9:
                break  # budget exhausted: this tool and all slower-gaining ones stay on the CPU
            used_mb += need
            self.mapping[t] = Mode.GPU_NOW
        self.order = order  # speedup order, recorded with each proposal

    def propose(self, round_index: int) -> Proposal:
        return Proposal(dict(self.mapping), {"speedup_order": list(self.order)})
