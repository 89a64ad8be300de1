"""What a placement asks of the Ray cluster, and the plan of one run: pure code (Ray is not imported).

Every started task is a *lease*, a Ray task that requests what its placement needs, so Ray chooses
the node and never over-commits one: ``cpu`` asks for one CPU; ``gpu_now`` and ``gpu_queue`` a GPU
share (``GPU_SHARE``) and the task's VRAM as the custom resource ``vram_mb`` (``VRAM_RESOURCE``),
which every GPU node declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.driver import Failure

NAMESPACE = "agentsched"  # Ray namespace of the testbed's named actors
GPU_SHARE = 0.01  # GPU fraction a GPU lease requests: the GPU is shared, VRAM (vram_mb) is the real limit
VRAM_RESOURCE = "vram_mb"  # custom resource: MB of GPU memory a node offers
LEASE_RETRIES = 3  # Ray re-runs a lease whose worker or node died this many times


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node as the testbed sees it."""

    node_id: str
    cpus: float
    gpus: float
    vram_mb: float


def resolve_user_tools(bases: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """Import path -> the user's Tool class or instance, shipped to the actors (pickled: a class by
    reference when importable there, else by value; an instance as one copy per node)."""
    from agentsched.model.tool import is_tool_path, resolve_tool

    return {b: resolve_tool(b) for b, _ in bases.values() if is_tool_path(b)}


def plan(
    workflow: Workflow, modes: Mapping[str, Mode], bases: Mapping[str, tuple[str, int]], *, emulated: bool
) -> tuple[dict[str, tuple[str, ...]], list[tuple[tuple[str, ...], str]], bool]:
    """Per task its tool key in the actors, the hosts' warm list ``(key, device)``, and whether
    gpu_now tools are staged (host until the task runs, as the local testbed does under a budget)."""
    staged = not emulated and workflow.vram_budget_mb is not None
    keys: dict[str, tuple[str, ...]] = {}
    needs: list[tuple[tuple[str, ...], str]] = []
    for t in workflow.task_ids:
        base = bases[t][0]
        if modes[t] is Mode.CPU:
            keys[t] = (base, "cpu")  # one shared host instance per node
            needs.append((keys[t], "cpu"))
        elif modes[t] is Mode.GPU_NOW:
            keys[t] = (base, "gpu", t)  # the task's own instance
            needs.append((keys[t], "cuda" if not emulated and not staged else "cpu"))
        else:
            keys[t] = (base, "queue")  # loaded by the queue actor at admission
    return keys, list(dict.fromkeys(needs)), staged


def unplaceable(workflow: Workflow, modes: Mapping[str, Mode], nodes: list[NodeInfo]) -> Failure | None:
    """A GPU task that no node could ever hold (Ray would wait for it forever): an error, not a hang.
    A task larger than the workflow's budget is left to the start rules (oom, as on every testbed)."""
    for t in workflow.task_ids:
        why = None if modes[t] is Mode.CPU else too_big(workflow, t, nodes)
        if why is not None:
            return Failure(Status.ERROR, t, why)
    return None


def too_big(workflow: Workflow, task: str, nodes: list[NodeInfo]) -> str | None:
    """Why no node could ever hold ``task`` on its GPU (None: one can, or the workflow's budget
    refuses it anyway: the start rules' oom, as on every testbed)."""
    card = workflow.task_cards[task]
    need, budget = card.vram_needed_mb, workflow.vram_budget_mb
    if not card.has_gpu or (budget is not None and need > budget + 1e-9):
        return None
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if any(n.vram_mb + 1e-9 >= need for n in gpu_nodes):
        return None
    most = max((n.vram_mb for n in gpu_nodes), default=0.0)
    return f"task {task} ({card.name}) needs {need:g} MB but no Ray node offers that much vram_mb (largest {most:g} MB)"


def lease_options(mode: Mode, vram_mb: float) -> dict[str, Any]:
    """What a lease asks Ray for: a CPU, or a GPU share and the task's VRAM."""
    opts: dict[str, Any] = {"scheduling_strategy": "SPREAD", "max_retries": LEASE_RETRIES}
    if mode is Mode.CPU:
        opts["num_cpus"] = 1
    else:
        opts.update(num_cpus=0, num_gpus=GPU_SHARE)
        if vram_mb > 0:
            opts["resources"] = {VRAM_RESOURCE: vram_mb}
    return opts
