"""The paper's 13 scenarios (Table 3) as built-in workflow files, and workflow lookup by name or path."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from agentsched.errors import WorkflowError
from agentsched.model.workflow import Workflow
from agentsched.model.workflow_io import load_workflow_file_and_world, load_yaml, parse_workflow


def list_scenarios() -> list[str]:
    """Built-in scenario names, S1..S13 in numeric order."""
    root = resources.files("agentsched.data") / "scenarios"
    names = [p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml")]
    return sorted(names, key=lambda n: (len(n), n))


@lru_cache(maxsize=64)
def load_scenario(name: str) -> Workflow:
    """A built-in scenario by name (case-insensitive: s13 == S13)."""
    key = name.upper()
    if key not in list_scenarios():
        raise WorkflowError(f"unknown scenario {name!r} (built-in: {', '.join(list_scenarios())})")
    text = (resources.files("agentsched.data") / "scenarios" / f"{key}.yaml").read_text()
    return parse_workflow(load_yaml(text), key)


def resolve_workflow(name_or_path: str | Path) -> Workflow:
    """A built-in scenario name (S1..S13) or a path to a .yaml/.yml/.json workflow file."""
    return resolve_workflow_and_world(name_or_path)[0]


def resolve_workflow_and_world(name_or_path: str | Path) -> tuple[Workflow, str | None]:
    """``resolve_workflow``, and the simulated world a workflow file's ``world:`` key names (a
    built-in name or a resolved path; None for built-in scenarios and files without the key)."""
    s = str(name_or_path)
    if s.upper() in list_scenarios() and not Path(s).exists():
        return load_scenario(s), None
    if Path(s).suffix in (".yaml", ".yml", ".json") or Path(s).exists():
        return load_workflow_file_and_world(s)
    raise WorkflowError(f"{s!r} is neither a built-in scenario ({', '.join(list_scenarios())}) nor a workflow file")
