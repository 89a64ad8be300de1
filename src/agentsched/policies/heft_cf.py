"""HEFT-CF: HEFT whose GPU costs are inflated by a static contention factor.

Sources: HEFT as in ``heft.py`` (Topcuoglu et al., IEEE TPDS 2002); the contention-factor variant
is the baseline of Lu & Reda, "Agentic CPU-GPU Scheduling for Heterogeneous AI Workloads"
(arXiv:2607.22242), Table 4 ("HEFT-CF").

A GPU placement of task t that would overlap k already-placed GPU tasks (their predicted
intervals intersect t's isolated interval) is costed ``gpu_ms * (1 + factor * k)``. The factor is
static (one number for every tool pair; not learned). Default 0.5 per concurrent GPU task: the
paper's Table 2 shows all-GPU inflating the four S5 tools by x1.43..x3.50 beside three others,
mean x2.4, i.e. about +0.47 per neighbour. Everything else (ranks, CPU cores, VRAM guard, ties) is
HEFT's.
"""

from __future__ import annotations

from agentsched.errors import PolicyError
from agentsched.model.cards import ToolCard
from agentsched.policies.heft import HeftPolicy, PlannedTask

DEFAULT_CONTENTION_FACTOR = 0.5


class HeftCfPolicy(HeftPolicy):
    """HEFT with GPU costs x (1 + factor x concurrently placed GPU tasks)."""

    name = "heft-cf"

    def __init__(
        self,
        *,
        cpu_cores: int | None = None,
        machine: str = "parallel",
        contention_factor: float = DEFAULT_CONTENTION_FACTOR,
    ) -> None:
        super().__init__(cpu_cores=cpu_cores, machine=machine)
        if not isinstance(contention_factor, (int, float)) or contention_factor < 0:
            raise PolicyError(f"policy {self.name}: contention_factor must be >= 0, got {contention_factor!r}")
        self.contention_factor = float(contention_factor)  # extra cost per concurrent GPU task

    def gpu_cost_ms(self, task: str, card: ToolCard, start_ms: float, gpu_plan: list[PlannedTask]) -> float:
        assert card.gpu_ms is not None
        end = start_ms + card.gpu_ms  # the isolated interval decides who counts as concurrent
        k = sum(1 for p in gpu_plan if p.start_ms < end - 1e-9 and p.finish_ms > start_ms + 1e-9)
        return card.gpu_ms * (1.0 + self.contention_factor * k)
