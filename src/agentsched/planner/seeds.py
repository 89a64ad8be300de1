"""Heuristic starting points of the search: HEFT (warm start), the rules reasoner's round 0 (warm
start), all-CPU, each task on its faster isolated device, and (three-way) the GPU-faster tasks on
the queue. Only cards or the planner's own estimates are used."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import DecisionSpace, Mode, Workflow
from agentsched.planner.initial import card_mapping
from agentsched.planner.initial import tag_mapping as _tag_mapping
from agentsched.planner.predict import TaskParams
from agentsched.policies.heft import HeftPolicy

MappingT = dict[str, Mode]


def estimate_seeds(workflow: Workflow, params: Mapping[str, TaskParams]) -> list[MappingT]:
    """Seeds from per-task estimates: all-CPU, faster device (gpu_now), faster device (gpu_queue)."""
    ids = workflow.task_ids
    faster = {t: (p.gpu_ms is not None and p.gpu_ms < p.cpu_ms) for t, p in params.items()}
    out = [{t: Mode.CPU for t in ids}, {t: (Mode.GPU_NOW if faster[t] else Mode.CPU) for t in ids}]
    if workflow.decision_space is DecisionSpace.THREE_WAY:
        out.append({t: (Mode.GPU_QUEUE if faster[t] else Mode.CPU) for t in ids})
    return out


def card_seeds(workflow: Workflow, cards: Mapping[str, ToolCard]) -> list[MappingT]:
    """Warm start: HEFT's mapping and the rules' round 0 (``initial.card_mapping``)."""
    out = [{t: p.mode for t, p in HeftPolicy().schedule(workflow, cards).items()}]
    out.append(card_mapping(workflow, cards)[0])
    return out


def tag_mapping(workflow: Workflow, tags: Mapping[str, tuple[str, ...]]) -> MappingT:
    """Cold start before any run: compute-bound tools on the GPU, the rest on the CPU (as agent-rules-cold)."""
    return _tag_mapping(workflow, tags)[0]


def gpu_profile(
    workflow: Workflow,
    tags: Mapping[str, tuple[str, ...]],
    has_gpu: Callable[[str], bool],
    seen: set[tuple[str, bool]],
    base: MappingT,
) -> tuple[MappingT, str] | None:
    """Cold start: a probe running the GPU-capable tasks never seen on the GPU there (isolated on the queue
    in three-way, on gpu_now in binary), the rest as in ``base``; a task seen nowhere that is not
    compute-bound goes to the CPU in the same probe (one probe instead of two: its GPU latency stays
    uncertain, so probing by value tries it if it could pay). None when there is nothing to profile."""
    no_gpu = [t for t in workflow.task_ids if has_gpu(t) and (t, True) not in seen]
    neither = [t for t in no_gpu if (t, False) not in seen and "compute-bound" not in tags[t]]
    no_gpu = [t for t in no_gpu if t not in neither]
    if not no_gpu:
        return None
    gpu_mode = Mode.GPU_QUEUE if workflow.decision_space is DecisionSpace.THREE_WAY else Mode.GPU_NOW
    m = {t: (gpu_mode if t in no_gpu else Mode.CPU if t in neither else base[t]) for t in workflow.task_ids}
    return m, f"cold-start profile: {', '.join(no_gpu)} on {workflow.decision_space.label(gpu_mode)}"


def cpu_profile(
    workflow: Workflow,
    tags: Mapping[str, tuple[str, ...]],
    has_gpu: Callable[[str], bool],
    seen: set[tuple[str, bool]],
    base: MappingT,
) -> tuple[MappingT, str] | None:
    """Cold start: a probe running on the CPU the tasks never seen there except compute-bound ones (their
    CPU latency follows the GPU one by the tag's speedup: a CPU run of a dense model is the most
    expensive probe there is), the rest as in ``base``. None when there is nothing to profile."""
    no_cpu = [t for t in workflow.task_ids if (t, False) not in seen and "compute-bound" not in tags[t]]
    if not no_cpu:
        return None
    return {
        t: (Mode.CPU if t in no_cpu else base[t]) for t in workflow.task_ids
    }, f"cold-start profile: {', '.join(no_cpu)} on the CPU"
