"""Round 0 without measurements: the written rules of the prompt as pure functions of the workflow
and what a profiler wrote (cards) or what a user said (tags). Both the rules reasoner (``agent/rules.py``)
and the planner's search seeds (``seeds.py``) use them, so they live here, below both.

* warm start, binary space: the ratio guideline (ratio = cpu_ms / gpu_ms): no GPU implementation or
  ratio < 1 -> cpu; ratio >= 7 -> gpu; 1 <= ratio < 7 is ambiguous: cpu only if its cpu_ms stays
  within the longest task it runs beside (so the offload costs no time and relieves the GPU).
* warm start, three-way space: structural rules. gpu_now goes, while the VRAM budget holds for tasks
  that can overlap, to the tasks that lose most per MB without it (loss = what the cheaper of cpu and
  gpu_queue costs over gpu_now). The others go to gpu_queue if their place in the serial queue (every
  earlier queued task's load + run, then their own) still ends before their cpu_ms, else to cpu.
* cold start: semantic tags. compute-bound -> gpu (gpu_now); every other tag -> cpu.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import DecisionSpace, Mode, Workflow, fits_vram

MappingT = dict[str, Mode]

GPU_TAGS = frozenset({"compute-bound"})  # cold start: tags of dense kernels a GPU accelerates
RATIO_GPU = 7.0  # ratio at and above which a task stays on the GPU
RATIO_CPU = 1.0  # ratio below which the CPU is faster even in isolation


def tag_mapping(workflow: Workflow, tags: Mapping[str, tuple[str, ...]]) -> tuple[MappingT, str]:
    """Cold start before any run: compute-bound tools on the GPU, the rest on the CPU."""
    m = {t: (Mode.GPU_NOW if GPU_TAGS & set(tags[t]) else Mode.CPU) for t in workflow.task_ids}
    return m, "round 0, cold start: compute-bound tags on the GPU, every other tag on the CPU"


def card_mapping(workflow: Workflow, cards: Mapping[str, ToolCard]) -> tuple[MappingT, str]:
    """Warm start: the ratio guideline (binary space) or the structural rules (three-way)."""
    if workflow.decision_space is DecisionSpace.BINARY:
        return _ratio(workflow, cards), "round 0, warm start: ratio guideline (cpu_ms/gpu_ms)"
    return (
        _structural(workflow, cards),
        "round 0, warm start: structural rules (VRAM budget, queue load cost, queue timeline)",
    )


def _cpu_only(workflow: Workflow, cards: Mapping[str, ToolCard]) -> tuple[MappingT, list[str]]:
    """Tasks the CPU wins outright (no GPU implementation, or ratio < 1) -> cpu; the rest, in order."""
    m: MappingT = {}
    capable = []
    for t in workflow.task_ids:
        c = cards[t]
        if not c.has_gpu or (c.speedup or 0.0) < RATIO_CPU:
            m[t] = Mode.CPU
        else:
            capable.append(t)
    return m, capable


def _ratio(workflow: Workflow, cards: Mapping[str, ToolCard]) -> MappingT:
    ids = workflow.task_ids
    m, capable = _cpu_only(workflow, cards)
    ambiguous = []
    for t in capable:
        if (cards[t].speedup or 0.0) >= RATIO_GPU:
            m[t] = Mode.GPU_NOW
        else:
            ambiguous.append(t)

    def time_ms(u: str) -> float:
        cu = cards[u]
        on_cpu = m.get(u, Mode.GPU_NOW) is Mode.CPU or not cu.has_gpu
        return cu.cpu_ms if on_cpu else cu.gpu_ms  # type: ignore[return-value]

    times = {u: time_ms(u) for u in ids}  # kept current as tasks are decided: one lookup per pair
    for t in ambiguous:
        bottleneck = max((times[u] for u in workflow.concurrent[t]), default=0.0)
        m[t] = Mode.CPU if cards[t].cpu_ms <= bottleneck else Mode.GPU_NOW
        times[t] = time_ms(t)
    return {t: m[t] for t in ids}


def _structural(workflow: Workflow, cards: Mapping[str, ToolCard]) -> MappingT:
    ids = workflow.task_ids
    budget = workflow.vram_budget_mb
    m, gpu_capable = _cpu_only(workflow, cards)

    def loss(t: str) -> float:
        c = cards[t]
        assert c.gpu_ms is not None
        return min(c.cpu_ms, c.gpu_ms + c.load_needed_ms) - c.gpu_ms

    def density(t: str) -> float:
        v = cards[t].vram_needed_mb
        return loss(t) / v if v > 0 else float("inf")

    order = {t: i for i, t in enumerate(ids)}
    now: dict[str, float] = {}  # gpu_now task -> VRAM MB of the gpu_now tasks that can overlap it
    for t in sorted(gpu_capable, key=lambda u: (-density(u), order[u])):
        if budget is None:
            now[t] = 0.0
        else:
            _add_if_fits(workflow, cards, now, t, budget)
    queue_end_ms = 0.0
    for t in ids:
        if t in m:
            continue
        c = cards[t]
        assert c.gpu_ms is not None
        if t in now:
            m[t] = Mode.GPU_NOW
            continue
        finish = queue_end_ms + c.load_needed_ms + c.gpu_ms
        if finish < c.cpu_ms and (budget is None or c.vram_needed_mb <= budget):
            m[t] = Mode.GPU_QUEUE
            queue_end_ms = finish
        else:
            m[t] = Mode.CPU
    return {t: m[t] for t in ids}


def _add_if_fits(
    workflow: Workflow, cards: Mapping[str, ToolCard], beside_mb: dict[str, float], t: str, budget_mb: float
) -> None:
    """Adds ``t`` to the gpu_now tasks ``beside_mb`` (task -> VRAM of the gpu_now tasks that can
    overlap it) when the VRAM of every gpu_now task plus the gpu_now tasks beside it stays in the
    budget. Why kept current: rechecking every pair for each candidate took cubic time (a 1,000-task
    chain with a budget: a minute for round 0). The sums run in the order the tasks were added, as
    the pairwise check summed them (not a set's order: a sum at the budget's edge would then depend
    on the process's hash seed)."""
    need_mb = cards[t].vram_needed_mb
    concurrent = workflow.concurrent[t]
    overlap = [u for u in beside_mb if u in concurrent]
    mine_mb = sum(cards[u].vram_needed_mb for u in overlap)
    if not fits_vram(mine_mb, need_mb, budget_mb):
        return
    if any(not fits_vram(beside_mb[u] + need_mb, cards[u].vram_needed_mb, budget_mb) for u in overlap):
        return
    for u in overlap:
        beside_mb[u] += need_mb
    beside_mb[t] = mine_mb
