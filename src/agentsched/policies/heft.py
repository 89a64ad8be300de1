"""HEFT list scheduling on the isolated profile costs.

Source: H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002.

Machine model (``machine``). Processors are the GPU and ``cpu_cores`` CPU cores; a CPU core runs
one task at a time (insertion-based, as in the paper). Communication costs are zero: the tools
share one host and the cards' GPU times already include transfers.

* ``parallel`` (default): the GPU is one processor that, like ``gpu_now``, runs several tasks at
  once, each at its isolated speed, i.e. blind to contention (the paper's point); ``cpu_cores``
  None means one core per task (the simulator's many-core host). With both unbounded, HEFT reduces
  to "each task on its faster device, earliest finish first" (classical HEFT with n CPU and n GPU
  processors). ``heft_cf`` inflates GPU costs by the tasks planned beside it instead.
* ``classical``: Topcuoglu et al.'s machine: every processor, the GPU included, runs one task at a
  time (insertion-based), with ``cpu_cores`` CPU cores (None: one) and one GPU. A GPU task then
  waits for the previous one, so HEFT spreads work over CPU and GPU. No GPU tasks overlap, so
  ``heft_cf``'s factor never applies and heft-cf equals heft.

Algorithm. Upward rank ``rank(t) = w(t) + max over successors rank(s)`` with ``w(t)`` the mean
cost over the q = 1 + cpu_cores processors (tools without a GPU implementation: the CPU cost); tasks
in decreasing rank (ties: file order) go to the processor with the earliest finish time (ties: the
CPU, which holds no VRAM). Static: the same mapping every round; measurements are ignored.

Modes and budget. GPU placements are ``gpu_now`` in both decision spaces (HEFT has no notion of a
load-then-run queue). Under a VRAM budget a GPU placement is only allowed when the
``VramGuard`` admits it (its VRAM plus that of every GPU task that may run beside it fits), so
HEFT never proposes an infeasible mapping; tasks refused by the guard go to the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.errors import PolicyError
from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies._common import CpuCores, VramGuard
from agentsched.policies.base import Policy, PolicyContext, Proposal

MACHINE_MODELS = ("parallel", "classical")


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """One task in a list scheduler's own (predicted) timeline."""

    task: str  # task id
    mode: Mode  # cpu or gpu_now
    processor: str  # "gpu" or "cpuK"
    start_ms: float  # predicted start
    finish_ms: float  # predicted finish


def upward_ranks(workflow: Workflow, mean_cost_ms: Mapping[str, float]) -> dict[str, float]:
    """rank_u(t) = mean cost of t + max over successors of rank_u (zero communication cost)."""
    rank: dict[str, float] = {}
    for t in reversed(workflow.topo_order):
        rank[t] = mean_cost_ms[t] + max((rank[s] for s in workflow.succs[t]), default=0.0)
    return rank


def mean_cost_ms(card: ToolCard, cpu_cores: int) -> float:
    """Average cost over the processors that can run the task (HEFT's w-bar)."""
    if card.gpu_ms is None:
        return card.cpu_ms  # only the CPU cores run it
    return (card.gpu_ms + cpu_cores * card.cpu_ms) / (cpu_cores + 1)


class HeftPolicy(Policy):
    """HEFT (Topcuoglu et al. 2002) on isolated card costs; contention-blind."""

    name = "heft"

    def __init__(self, *, cpu_cores: int | None = None, machine: str = "parallel") -> None:
        if cpu_cores is not None and (not isinstance(cpu_cores, int) or isinstance(cpu_cores, bool) or cpu_cores < 1):
            raise PolicyError(f"policy {self.name}: cpu_cores must be an integer >= 1, got {cpu_cores!r}")
        if machine not in MACHINE_MODELS:
            raise PolicyError(
                f"policy {self.name}: machine must be one of {', '.join(MACHINE_MODELS)}, got {machine!r}"
            )
        self.cpu_cores = cpu_cores  # None: parallel: one core per task; classical: one core
        self.machine = machine  # "parallel" or "classical" (module docstring)
        self.plan: dict[str, PlannedTask] = {}

    @property
    def label(self) -> str:
        return self.name if self.machine == "parallel" else f"{self.name} (classical machine)"

    # ---- the hook heft-cf overrides -----------------------------------------------------------
    def gpu_cost_ms(self, task: str, card: ToolCard, start_ms: float, gpu_plan: list[PlannedTask]) -> float:
        """Predicted GPU run time of ``task`` starting at ``start_ms`` beside ``gpu_plan``: isolated."""
        assert card.gpu_ms is not None
        return card.gpu_ms

    # ---- list scheduling ----------------------------------------------------------------------
    def schedule(self, workflow: Workflow, cards: Mapping[str, ToolCard]) -> dict[str, PlannedTask]:
        classical = self.machine == "classical"
        cores = self.cpu_cores if self.cpu_cores is not None else (1 if classical else len(workflow.tasks))
        ranks = upward_ranks(workflow, {t: mean_cost_ms(cards[t], cores) for t in workflow.task_ids})
        gpu = CpuCores(1) if classical else None  # classical: the GPU is one more one-at-a-time processor
        index = {t: i for i, t in enumerate(workflow.task_ids)}
        order = sorted(workflow.task_ids, key=lambda t: (-ranks[t], index[t]))
        cpu = CpuCores(cores)
        guard = VramGuard(workflow, cards)
        plan: dict[str, PlannedTask] = {}
        gpu_plan: list[PlannedTask] = []
        for t in order:
            card = cards[t]
            ready = max((plan[p].finish_ms for p in workflow.preds[t]), default=0.0)
            start, core = cpu.earliest(ready, card.cpu_ms)
            best = PlannedTask(t, Mode.CPU, f"cpu{core}", start, start + card.cpu_ms)
            if card.has_gpu and guard.fits(t):
                gpu_start = ready if gpu is None else gpu.earliest(ready, card.gpu_ms)[0]  # type: ignore[arg-type]
                finish = gpu_start + self.gpu_cost_ms(t, card, gpu_start, gpu_plan)
                if finish < best.finish_ms - 1e-9:  # strict: ties stay on the CPU
                    best = PlannedTask(t, Mode.GPU_NOW, "gpu", gpu_start, finish)
            if best.mode is Mode.CPU:
                cpu.book(core, best.start_ms, best.finish_ms)
            else:
                if gpu is not None:
                    gpu.book(0, best.start_ms, best.finish_ms)
                guard.admit(t)
                gpu_plan.append(best)
            plan[t] = best
        return plan

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self.plan = self.schedule(ctx.workflow, ctx.cards)

    def propose(self, round_index: int) -> Proposal:
        wf = self.ctx.workflow
        info: dict[str, Any] = {
            "planned_makespan_ms": round(max(p.finish_ms for p in self.plan.values()), 3),
            "planned": {
                t: [self.plan[t].processor, round(self.plan[t].start_ms, 3), round(self.plan[t].finish_ms, 3)]
                for t in wf.task_ids
            },
        }
        return Proposal({t: self.plan[t].mode for t in wf.task_ids}, info)
