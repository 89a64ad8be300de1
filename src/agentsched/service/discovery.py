"""Which workflows a service serves: files, folders of them and scenario names, checked once."""

from __future__ import annotations

import importlib
from pathlib import Path

from agentsched.errors import AgentschedError, WorkflowError
from agentsched.model.tool import is_tool_path
from agentsched.model.workflow import Workflow
from agentsched.testbeds.spec import TestbedSpec

WORKFLOW_SUFFIXES = (".yaml", ".yml")


def workflow_files(items: tuple[str, ...]) -> list[Workflow]:
    """Each item: a workflow file, a folder (its *.yaml/*.yml files) or a built-in scenario name."""
    from agentsched.scenarios import resolve_workflow

    sources: dict[str, str] = {}  # workflow name -> where it came from
    out: list[Workflow] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in WORKFLOW_SUFFIXES)
            if not files:
                raise WorkflowError(f"folder {item} holds no workflow file (*.yaml, *.yml)")
            found = [(resolve_workflow(str(f)), str(f)) for f in files]
        else:
            found = [(resolve_workflow(item), item)]
        for wf, source in found:
            if wf.name in sources:
                raise WorkflowError(
                    f"two workflows are named {wf.name} ({sources[wf.name]} and {source}): each "
                    "served workflow needs its own name"
                )
            if "/" in wf.name:  # it would be listed, and no request could reach it
                raise WorkflowError(
                    f"workflow {wf.name!r} ({source}): a served workflow's name is part of its URL "
                    "and may not hold a '/'"
                )
            sources[wf.name] = source
            out.append(wf)
    if not out:
        raise WorkflowError("no workflow to serve")
    return out


def check_live_cards(wf: Workflow) -> None:
    """Refuse live placement of a GPU tool with no card: the planner would place it from placeholder
    times (equal on both devices), so it would never leave the CPU and never be measured on the GPU.
    (Without CUDA the runtime already runs every tool as host code: nothing to refuse.)"""
    tasks = sorted(t for t in wf.unprofiled if wf.task_cards[t].has_gpu)
    if tasks:
        tools = sorted({wf.tasks[t].tool for t in tasks})
        raise AgentschedError(
            f"--placement live needs profiled cards for GPU tools, but task(s) {', '.join(tasks)} "
            f"of workflow {wf.name} have none (the planner would place them from placeholder "
            f"times): profile them with `agentsched profile --tools {','.join(tools)} --out "
            f"cards.json` and pass --cards cards.json"
        )


def import_tool_libraries(workflows: list[Workflow], spec: TestbedSpec) -> None:
    """Import the built-in tools' libraries once, here, before invocations run in many threads: two
    threads importing transformers for the first time at once can find it half-initialised ("cannot
    import name ... from partially initialized module transformers.utils"), failing a tool's load."""
    if spec.simulated or all(is_tool_path(t.tool) for w in workflows for t in w.tasks.values()):
        return
    for module in ("torch", "transformers"):
        try:
            importlib.import_module(module)
        except ImportError:  # the tools extra is missing: each tool says so when it loads
            return
