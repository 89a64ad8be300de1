"""All-GPU: every tool with a GPU implementation on the GPU at once, the rest on the CPU.

Source: the default of agent frameworks, which run every model-backed tool on the accelerator;
the baseline the paper (Lu & Reda, arXiv:2607.22242, Table 2 and Figure 5) compares against.

Modes and budget: ``gpu_now`` in both decision spaces (no framework queues tool calls); the VRAM
budget is ignored, as a framework default would, so over-budget scenarios run out of memory every
round (the paper's S13 round 0). Static: the same mapping every round.
"""

from __future__ import annotations

from agentsched.model.workflow import Mode
from agentsched.policies.base import Policy, Proposal


class AllGpuPolicy(Policy):
    """GPU-capable tools -> gpu_now; tools without a GPU implementation -> cpu."""

    name = "all-gpu"

    def propose(self, round_index: int) -> Proposal:
        cards = self.ctx.cards
        return Proposal({t: Mode.GPU_NOW if cards[t].has_gpu else Mode.CPU for t in self.ctx.workflow.task_ids})
