"""Heuristic starting points of the search: HEFT (warm start), the rules reasoner's round 0 (warm
start), all-CPU, each task on its faster isolated device, and (three-way) the GPU-faster tasks on
the queue. Only cards or the planner's own estimates are used."""

from __future__ import annotations

from collections.abc import Mapping

from agentsched.planner.predict import TaskParams
from agentsched.model.cards import ToolCard
from agentsched.model.workflow import DecisionSpace, Mode, Workflow
from agentsched.planner.initial import card_mapping
from agentsched.planner.initial import tag_mapping as _tag_mapping
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
