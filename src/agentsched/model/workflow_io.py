"""Reading a workflow file: YAML or JSON, validated into a ``Workflow``, one-line errors.

File format (YAML or JSON), the same one the built-in scenarios use::

    name: S13
    cards: a5500              # built-in card set, or a path relative to this file
    decision_space: three_way # binary (cpu/gpu, gpu == gpu_now) or three_way
    vram_budget_mb: 1100      # optional
    world: a5500              # optional: the simulated world (GPU contention) to run in; a built-in
                              # name or a path relative to this file. Read by the CLI for the
                              # sim testbed only: the Workflow object never carries it.
    tasks:
      A: {tool: clip, repeat: 12}
    edges: []                 # list of [from, to]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentsched.errors import AgentschedError, WorkflowError, validation_line
from agentsched.model.cards import builtin_card_sets
from agentsched.model.files import loads_json_unique, read_document
from agentsched.model.tool import tools_beside
from agentsched.model.workflow import MAX_EDGES, MAX_SEQUENCE_ITEMS, MAX_TASKS, Workflow
from agentsched.model.yaml_shape import yaml_too_large

# PyYAML's C loader (libyaml) parses about 10x faster than the pure-Python one; fall back when the
# wheel was built without libyaml. Only the parser differs: construction (and the checks below) is Python.
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeBase):  # type: ignore[misc, valid-type]
    """Safe loader that refuses duplicate keys (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
        self.flatten_mapping(node)  # resolve merge keys (<<: *anchor) first, as SafeLoader does
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_sequence(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
        # refuse a huge list before building it: YAML aliases make millions of entries cheap to write
        if len(node.value) > MAX_SEQUENCE_ITEMS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a list of {len(node.value):,} items (at most {MAX_SEQUENCE_ITEMS:,})", node.start_mark
            )
        return super().construct_sequence(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse YAML safely, refusing duplicate keys and lists longer than MAX_SEQUENCE_ITEMS."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a safe loader subclass


WORLD_KEY = "world"  # optional workflow-file key naming the simulated world (not a Workflow field)


def _take_world(data: dict[str, Any], source: str, base_dir: Path | None) -> str | None:
    """Remove the optional ``world:`` key from a workflow document; return it, a path resolved
    against ``base_dir`` when such a file exists (else as written: a built-in name)."""
    world = data.pop(WORLD_KEY, None)
    if world is None:
        return None
    if not isinstance(world, str) or not world.strip():
        raise WorkflowError(f"{source}: world: must be a built-in world name or a path to a world file")
    if base_dir is not None:
        candidate = base_dir / world
        if candidate.exists():
            return str(candidate)
    return world


def parse_workflow(data: Any, source: str, base_dir: Path | None = None) -> Workflow:
    """Validate a decoded workflow document (and its tools against its card set). An optional
    ``world:`` key is dropped: see ``parse_workflow_and_world``."""
    return parse_workflow_and_world(data, source, base_dir)[0]


def parse_workflow_and_world(data: Any, source: str, base_dir: Path | None = None) -> tuple[Workflow, str | None]:
    """The workflow of a decoded document, and the world its ``world:`` key names (None: none)."""
    if not isinstance(data, dict):
        raise WorkflowError(f"{source}: expected a mapping at the top level")
    data = dict(data)
    world = _take_world(data, source, base_dir)
    data.setdefault("name", Path(source).stem)
    if base_dir is not None:  # its tool modules are found beside it first (model/tool.py)
        tools_beside(base_dir)
    cards = data.get("cards")
    if base_dir is not None and isinstance(cards, str) and cards not in builtin_card_sets():
        # a card file is the one next to the workflow file, never one of the current directory's
        data["cards"] = str(base_dir / cards)
    try:
        wf = Workflow.model_validate(data)
    except ValidationError as e:
        raise WorkflowError(f"{source}: {validation_line(e.errors(), 'workflow', more=False)}") from None
    except AgentschedError as e:  # (a cycle, a card set: the file is named, as for every other error)
        raise type(e)(f"{source}: {e}") from None
    try:
        wf.validate_against_cards()
    except AgentschedError as e:
        raise WorkflowError(f"{source}: {e}") from None
    return wf, world


def load_workflow_file(path: str | Path) -> Workflow:
    """Load a workflow from a .yaml/.yml/.json file (its ``world:`` key, if any, is dropped)."""
    return load_workflow_file_and_world(path)[0]


def load_workflow_file_and_world(path: str | Path) -> tuple[Workflow, str | None]:
    """Load a workflow file, and the world its optional ``world:`` key names (None: none)."""
    p = Path(path)

    def load_yaml_within_caps(text: str) -> Any:
        # refuse a document whose parser events already exceed the caps, before anything is built
        too_large = yaml_too_large(text, MAX_TASKS, MAX_EDGES)
        if too_large is not None:
            raise WorkflowError(f"{p}: {too_large}")
        return load_yaml(text)

    parse = loads_json_unique if p.suffix == ".json" else load_yaml_within_caps
    try:
        data = read_document(p, "workflow file", WorkflowError, where=str(p), parse=parse)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if "nesting depth" in problem:  # libyaml's own depth limit: the same words as the Python parser's
            raise WorkflowError(f"{p}: nested too deeply") from None
        raise WorkflowError(f"{p}: invalid YAML{where}: {problem}") from None
    return parse_workflow_and_world(data, str(p), p.parent)
