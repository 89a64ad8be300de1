"""Workflows: a DAG of tool calls, the decision space a scheduler picks from, and a VRAM budget.

The types only; reading a workflow file (YAML or JSON) is ``model.workflow_io``
(``load_workflow_file``, ``parse_workflow``, ...), which imports this module.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentsched.errors import WorkflowError
from agentsched.model.budget import vram_budget_problem
from agentsched.model.cards import MAX_REPEAT, CardSet, ToolCard, load_card_set

# Size caps, far above any agent workflow (the paper's have 4 tasks) and low enough that `show`,
# `oracle`'s refusal and a `run` round stay within seconds (benchmarks/large_inputs.py).
MAX_TASKS = 10_000
MAX_EDGES = 100_000
MAX_SEQUENCE_ITEMS = MAX_EDGES  # longest YAML list built at all (checked before it is constructed)

# Task names (docs/workflows.md): what a mapping on the command line (`A=gpu,B=cpu`), a Gantt label
# and a prompt can carry unchanged. No '=', ',', spaces, control or bidirectional characters.
TASK_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
_TASK_NAME_RE = re.compile(TASK_NAME_PATTERN)
TASK_NAME_RULE = "1-64 characters from A-Z a-z 0-9 _ . -, not starting with . or -"


def check_task_name(name: str) -> str:
    """``name`` when it matches TASK_NAME_PATTERN; ValueError naming the rule otherwise."""
    if not _TASK_NAME_RE.fullmatch(name):
        shown = ascii(name) if len(name) <= 80 else ascii(name[:80])[:-1] + "...'"
        raise ValueError(f"task name {shown} is not allowed (use {TASK_NAME_RULE})")
    return name


class Mode(str, enum.Enum):
    """Where one task runs."""

    CPU = "cpu"  # on the host CPU
    GPU_NOW = "gpu_now"  # on the GPU at once, holding its VRAM while it runs
    GPU_QUEUE = "gpu_queue"  # serialized GPU queue: no VRAM while waiting, pays load_ms when admitted

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # results print as plain strings (a Mode is one: Mode.CPU == "cpu")
        return repr(self.value)


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
    repeat: int = Field(default=1, ge=1, le=MAX_REPEAT, strict=True)  # amplification K; strict: `true` is not 1

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


def task_modes(space: DecisionSpace, card: ToolCard) -> tuple[Mode, ...]:
    """The modes a scheduler may place a task on: ``cpu`` alone for a tool without a GPU implementation
    (a GPU placement would run the same host code: ``effective_mode``), else the space's modes."""
    return space.modes if card.has_gpu else (Mode.CPU,)


def effective_mapping(cards: Mapping[str, ToolCard], mapping: Mapping[str, Mode]) -> dict[str, Mode]:
    """Where each task of ``mapping`` really runs (``effective_mode`` per task)."""
    return {t: effective_mode(cards[t], m) for t, m in mapping.items()}


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

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v: str) -> str:
        # why: a name is printed in every header and table; one holding ESC sequences retitled and
        # cleared the user's terminal (free text otherwise: docs/workflows.md)
        if not v.isprintable():
            raise ValueError(f"workflow name {ascii(v[:80])} holds a control character (a name is one printable line)")
        return v

    @field_validator("tasks", mode="before")
    @classmethod
    def _short_tasks(cls, v: Any) -> Any:
        # "A: clip" is shorthand for "A: {tool: clip}"
        if isinstance(v, dict):
            if len(v) > MAX_TASKS:
                raise ValueError(f"{len(v):,} tasks; at most {MAX_TASKS:,} are allowed")
            for k in v:
                check_task_name(str(k))
            return {str(k): ({"tool": t} if isinstance(t, str) else t) for k, t in v.items()}
        return v

    @field_validator("edges", mode="before")
    @classmethod
    def _edges_tuples(cls, v: Any) -> Any:
        if v is None:
            return ()
        if isinstance(v, list):
            if len(v) > MAX_EDGES:
                raise ValueError(f"{len(v):,} edges; at most {MAX_EDGES:,} are allowed")
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
        seen: set[tuple[str, str]] = set()
        for a, b in self.edges:
            if (a, b) in seen:
                raise WorkflowError(f"workflow {self.name!r}: edge [{a}, {b}] is listed twice")
            seen.add((a, b))
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
        problem = vram_budget_problem(self.vram_budget_mb)  # the budget's one rule (model/budget.py)
        if problem is not None:
            raise WorkflowError(f"workflow {self.name!r}: vram_budget_mb {problem}")

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
    def task_index(self) -> dict[str, int]:
        """Position of each task in file order (the canonical order), for O(1) lookups."""
        return {t: i for i, t in enumerate(self.tasks)}

    @cached_property
    def preds(self) -> dict[str, tuple[str, ...]]:
        # one pass over the edges (edge order kept): per-task scans were O(tasks x edges)
        out: dict[str, list[str]] = {t: [] for t in self.tasks}
        for p, c in self.edges:
            out[c].append(p)
        return {t: tuple(v) for t, v in out.items()}

    @cached_property
    def succs(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {t: [] for t in self.tasks}
        for p, c in self.edges:
            out[p].append(c)
        return {t: tuple(v) for t, v in out.items()}

    @cached_property
    def sinks(self) -> list[str]:
        return [t for t in self.tasks if not self.succs[t]]

    @cached_property
    def related_masks(self) -> dict[str, int]:
        """Per task, a bitmask (bit i = the i-th task in file order) of itself, its ancestors and its
        descendants: the tasks that can never run beside it. Bitmasks keep this O(tasks x edges / 64)
        where per-task graph searches were quadratic in Python objects."""
        idx = self.task_index
        desc: dict[str, int] = {}
        for t in reversed(self.topo_order):
            m = 0
            for s in self.succs[t]:
                m |= desc[s] | (1 << idx[s])
            desc[t] = m
        anc: dict[str, int] = {}
        for t in self.topo_order:
            m = 0
            for p in self.preds[t]:
                m |= anc[p] | (1 << idx[p])
            anc[t] = m
        return {t: desc[t] | anc[t] | (1 << idx[t]) for t in self.tasks}

    def may_overlap(self, a: str, b: str) -> bool:
        """True when no dependency path joins ``a`` and ``b`` (some timing runs them together)."""
        return a != b and not (self.related_masks[a] >> self.task_index[b]) & 1

    @cached_property
    def concurrent(self) -> Mapping[str, frozenset[str]]:
        """The overlap sets: for each task, the tasks that some timing runs beside it (neither its
        ancestor nor its descendant). Written once here for every scheduler and the monitor; each
        set is built on first use (n sets of up to n tasks up front is quadratic memory)."""
        return _ConcurrentSets(self)

    @cached_property
    def topo_order(self) -> list[str]:
        # lexicographic by file order so that ties are deterministic
        return list(nx.lexicographical_topological_sort(self.graph, key=self.task_index.__getitem__))

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

    def within_budget(self, vram_budget_mb: float | None) -> Workflow:
        """The same workflow on a GPU whose VRAM budget is ``vram_budget_mb`` (its own when that is
        smaller; itself when None): what its policy must plan for where workflows share one GPU
        (``serve``). Why: served on a shared budget smaller than their own, policies planned for the
        whole GPU and ran mappings that could never fit (every round an oom, until they learnt it)."""
        budget = vram_budget_mb if self.vram_budget_mb is None else min(self.vram_budget_mb, vram_budget_mb or math.inf)
        if budget == self.vram_budget_mb:
            return self
        wf = self.model_copy(update={"vram_budget_mb": budget})
        wf.__dict__.pop("task_cards", None)  # an unprofiled GPU tool's card holds the budget
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


_BIT_BYTES = bytes.maketrans(b"01", b"\x00\x01")


class _ConcurrentSets(Mapping[str, frozenset[str]]):
    """Lazy ``Workflow.concurrent``: n sets of up to n tasks would be quadratic memory up front, and
    so would keeping every set asked for (a pass over all tasks: 125 MB at 5,000 tasks, 500 MB at
    10,000). The most recently used sets are kept up to about ``CACHED_IDS`` task ids in all (every
    set of a workflow of up to 300 tasks), each rebuilt from its bit mask when needed again."""

    CACHED_IDS = 100_000

    def __init__(self, workflow: Workflow) -> None:
        self._wf = workflow
        self._cache: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._keep = max(64, self.CACHED_IDS // max(1, len(workflow.tasks)))

    def __getitem__(self, task: str) -> frozenset[str]:
        got = self._cache.get(task)
        if got is not None:
            self._cache.move_to_end(task)
        else:
            mask = self._wf.related_masks[task]  # KeyError for an unknown task, as a dict would
            ids = self._wf.task_ids
            free = ((1 << len(ids)) - 1) & ~mask
            # bit i -> byte i (0 or 1), then compress() picks the ids in C: no Python loop over n bits
            flags = format(free, "b")[::-1].encode().translate(_BIT_BYTES)
            got = frozenset(itertools.compress(ids, flags))
            self._cache[task] = got
            if len(self._cache) > self._keep:
                self._cache.popitem(last=False)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._wf.tasks)

    def __len__(self) -> int:
        return len(self._wf.tasks)
