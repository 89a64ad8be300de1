"""Workflows: a DAG of tool calls, the decision space a scheduler picks from, and a VRAM budget.

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

import enum
import json
from functools import cached_property
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentsched.errors import AgentschedError, WorkflowError
from agentsched.model.cards import MAX_REPEAT, CardSet, ToolCard, load_card_set, read_small_text


class Mode(str, enum.Enum):
    """Where one task runs."""

    CPU = "cpu"  # on the host CPU
    GPU_NOW = "gpu_now"  # on the GPU at once, holding its VRAM while it runs
    GPU_QUEUE = "gpu_queue"  # serialized GPU queue: no VRAM while waiting, pays load_ms when admitted

    def __str__(self) -> str:
        return self.value


class DecisionSpace(str, enum.Enum):
    """Which modes a scheduler may use."""

    BINARY = "binary"  # cpu / gpu (gpu means gpu_now)
    THREE_WAY = "three_way"  # cpu / gpu_now / gpu_queue

    @property
    def modes(self) -> tuple[Mode, ...]:
        if self is DecisionSpace.BINARY:
            return (Mode.CPU, Mode.GPU_NOW)
        return (Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE)

    def label(self, mode: Mode) -> str:
        """How a mode is written in this space (binary prints gpu_now as 'gpu')."""
        if self is DecisionSpace.BINARY and mode is Mode.GPU_NOW:
            return "gpu"
        return mode.value


class Task(BaseModel):
    """One node of the DAG: ``repeat`` back-to-back calls of ``tool``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tool: str = Field(min_length=1)  # tool name in the card set (may itself be name_xK)
    repeat: int = Field(default=1, ge=1, le=MAX_REPEAT)  # amplification K

    @property
    def tool_label(self) -> str:
        return self.tool if self.repeat == 1 else f"{self.tool}_x{self.repeat}"


VRAM_EPS_MB = 1e-9  # float slack of the budget check (sums of card figures)


def fits_vram(held_mb: float, need_mb: float, budget_mb: float | None) -> bool:
    """Does ``need_mb`` more fit beside ``held_mb`` under the budget? (None: no budget.) The one
    VRAM-fit check of the start rules, the schedulers and the agent."""
    return budget_mb is None or held_mb + need_mb <= budget_mb + VRAM_EPS_MB


def effective_mode(card: ToolCard, mode: Mode) -> Mode:
    """Where a task placed on ``mode`` really runs: a tool without a GPU implementation placed on
    ``gpu_now`` or ``gpu_queue`` runs its host code as a ``cpu`` task (so both placements are one run)."""
    return Mode.CPU if mode is not Mode.CPU and not card.has_gpu else mode


class Workflow(BaseModel):
    """A validated workflow. Task order (file order) is the canonical order of mappings."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True)

    name: str = Field(min_length=1)
    cards: str = "a5500"  # card set name or path (resolved against the file's folder)
    decision_space: DecisionSpace = DecisionSpace.BINARY
    vram_budget_mb: float | None = None  # None: no budget (the GPU's own memory is assumed enough)
    description: str = ""
    tasks: dict[str, Task]
    edges: tuple[tuple[str, str], ...] = ()

    @field_validator("tasks", mode="before")
    @classmethod
    def _short_tasks(cls, v: Any) -> Any:
        # "A: clip" is shorthand for "A: {tool: clip}"
        if isinstance(v, dict):
            return {str(k): ({"tool": t} if isinstance(t, str) else t) for k, t in v.items()}
        return v

    @field_validator("edges", mode="before")
    @classmethod
    def _edges_tuples(cls, v: Any) -> Any:
        if v is None:
            return ()
        if isinstance(v, list):
            out = []
            for i, e in enumerate(v):  # never str() an edge: YAML aliases can make it huge
                if not isinstance(e, (list, tuple)) or len(e) != 2:
                    raise ValueError(f"edge #{i + 1} is not a [from, to] pair")
                if not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in e):
                    raise ValueError(f"edge #{i + 1}: endpoints must be task ids")
                out.append((str(e[0]), str(e[1])))
            return tuple(out)
        return v

    def model_post_init(self, __context: Any) -> None:
        if not self.tasks:
            raise WorkflowError(f"workflow {self.name!r} has no tasks")
        for a, b in self.edges:
            for t in (a, b):
                if t not in self.tasks:
                    raise WorkflowError(f"workflow {self.name!r}: edge [{a}, {b}] names unknown task {t!r}")
            if a == b:
                raise WorkflowError(f"workflow {self.name!r}: self-loop on task {a!r}")
        g = self.graph
        if not nx.is_directed_acyclic_graph(g):
            cycle = nx.find_cycle(g)
            path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
            raise WorkflowError(f"workflow {self.name!r} has a cycle: {path}")
        if self.vram_budget_mb is not None and self.vram_budget_mb < 0:
            raise WorkflowError(f"workflow {self.name!r}: negative vram_budget_mb {self.vram_budget_mb:g}")

    # ---- structure -------------------------------------------------------------------------
    @cached_property
    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self.tasks)
        g.add_edges_from(self.edges)
        return g

    @property
    def task_ids(self) -> list[str]:
        return list(self.tasks)

    @cached_property
    def preds(self) -> dict[str, tuple[str, ...]]:
        return {t: tuple(p for p, c in self.edges if c == t) for t in self.tasks}

    @cached_property
    def succs(self) -> dict[str, tuple[str, ...]]:
        return {t: tuple(c for p, c in self.edges if p == t) for t in self.tasks}

    @property
    def sinks(self) -> list[str]:
        return [t for t in self.tasks if not self.succs[t]]

    @cached_property
    def concurrent(self) -> dict[str, frozenset[str]]:
        """The overlap sets: for each task, the tasks that some timing runs beside it (neither its
        ancestor nor its descendant). Written once here for every scheduler and the monitor."""
        ids = self.topo_order
        bit = {t: 1 << i for i, t in enumerate(ids)}
        desc = dict.fromkeys(ids, 0)  # bitsets: one pass each way over the topological order
        anc = dict.fromkeys(ids, 0)
        for t in reversed(ids):
            for s in self.succs[t]:
                desc[t] |= bit[s] | desc[s]
        for t in ids:
            for p in self.preds[t]:
                anc[t] |= bit[p] | anc[p]
        every = (1 << len(ids)) - 1
        out = {}
        for t in self.task_ids:
            free = every & ~(desc[t] | anc[t] | bit[t])
            out[t] = frozenset(u for u in ids if free & bit[u])
        return out

    @cached_property
    def topo_order(self) -> list[str]:
        # lexicographic by file order so that ties are deterministic
        index = {t: i for i, t in enumerate(self.tasks)}
        return list(nx.lexicographical_topological_sort(self.graph, key=index.__getitem__))

    # ---- cards -----------------------------------------------------------------------------
    @cached_property
    def card_set(self) -> CardSet:
        return load_card_set(self.cards)

    @cached_property
    def task_cards(self) -> dict[str, ToolCard]:
        """Card per task (tool x repeat), resolved in the workflow's card set. A user tool
        (``package.module:Class``) the card set lacks gets its cold-start card (``model.tool.cold_card``)."""
        from agentsched.model.tool import cold_card

        cs = self.card_set
        out = {}
        for tid, t in self.tasks.items():
            if tid in self.unprofiled:
                out[tid] = cold_card(t.tool, self.vram_budget_mb).amplified(t.repeat)
            else:
                out[tid] = cs.resolve(t.tool, t.repeat)
        return out

    @cached_property
    def unprofiled(self) -> frozenset[str]:
        """Tasks of user tools without a card: only cold-start policies can schedule them."""
        from agentsched.model.tool import is_tool_path

        cs = self.card_set
        return frozenset(tid for tid, t in self.tasks.items() if is_tool_path(t.tool) and not cs.has_tool(t.tool))

    def with_cards(self, cards: str | CardSet) -> Workflow:
        """The same DAG against another card set (name, path, or an in-memory CardSet)."""
        if isinstance(cards, CardSet):
            wf = self.model_copy(update={"cards": cards.name})
            wf.__dict__["card_set"] = cards
            wf.__dict__.pop("task_cards", None)
            wf.__dict__.pop("unprofiled", None)
            wf.validate_against_cards()
            return wf
        wf = Workflow.model_validate({**self.model_dump(), "cards": str(cards)})
        wf.validate_against_cards()
        return wf

    def validate_against_cards(self) -> None:
        """Raise a one-line error for unknown tools or a budget no GPU placement can meet."""
        cards = self.task_cards  # raises CardError naming an unknown tool
        if self.vram_budget_mb is not None:
            gpu = [c.vram_needed_mb for c in cards.values() if c.has_gpu]
            if gpu and self.vram_budget_mb < min(gpu):
                raise WorkflowError(
                    f"workflow {self.name!r}: vram_budget_mb {self.vram_budget_mb:g} is below every "
                    f"tool's VRAM (smallest {min(gpu):g} MB): no GPU placement can ever fit"
                )

    @property
    def total_vram_mb(self) -> float:
        return sum(c.vram_needed_mb for c in self.task_cards.values())


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
        self.flatten_mapping(node)  # resolve merge keys (<<: *anchor) first, as SafeLoader does
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse YAML safely, refusing duplicate keys."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


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
    cards = data.get("cards")
    if base_dir is not None and isinstance(cards, str):
        candidate = base_dir / cards
        if candidate.exists():
            data["cards"] = str(candidate)
    try:
        wf = Workflow.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "workflow"
        msg = first["msg"].removeprefix("Value error, ")
        raise WorkflowError(f"{source}: {loc}: {msg}") from None
    except AgentschedError:
        raise
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
    if not p.exists():
        raise WorkflowError(f"workflow file not found: {p}")
    try:
        text = read_small_text(p, "workflow file")
    except ValueError as e:
        raise WorkflowError(str(e)) from None
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            data = load_yaml(text)
    except json.JSONDecodeError as e:
        raise WorkflowError(f"{p}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise WorkflowError(f"{p}: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise WorkflowError(f"{p}: invalid YAML{where}: {problem}") from None
    return parse_workflow_and_world(data, str(p), p.parent)
