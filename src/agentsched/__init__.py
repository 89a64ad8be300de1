"""agentsched: decide, for every tool call of an AI workflow, whether it runs on the CPU, at once on
the GPU (``gpu_now``) or in the serialized GPU queue (``gpu_queue``), for the lowest end-to-end
latency under GPU contention and a VRAM budget (Lu & Reda, arXiv:2607.22242)."""

from importlib import metadata as _metadata

from agentsched.errors import AgentschedError
from agentsched.model import (
    CardSet,
    DecisionSpace,
    Execution,
    Mode,
    Status,
    TaskSpan,
    Tool,
    ToolCard,
    Workflow,
    load_card_set,
    load_workflow_file,
    parse_mapping,
)
from agentsched.oracle import brute_force
from agentsched.scenarios import list_scenarios, load_scenario, resolve_workflow
from agentsched.testbeds import SimTestbed, Testbed
from agentsched.testbeds.spec import TestbedKind, TestbedSpec

try:  # the version is the installed package's metadata (pyproject.toml), written once
    __version__ = _metadata.version("agentsched")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):  # noqa: ANN202 - lazy: the runtime pulls in the loop and the store
    if name in ("Runtime", "InvokeResult"):
        from agentsched import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'agentsched' has no attribute {name!r}")


__all__ = [
    "AgentschedError",
    "CardSet",
    "InvokeResult",
    "Runtime",
    "DecisionSpace",
    "Execution",
    "Mode",
    "SimTestbed",
    "Status",
    "TaskSpan",
    "Testbed",
    "TestbedKind",
    "TestbedSpec",
    "Tool",
    "ToolCard",
    "Workflow",
    "brute_force",
    "list_scenarios",
    "load_card_set",
    "load_scenario",
    "load_workflow_file",
    "parse_mapping",
    "resolve_workflow",
]
