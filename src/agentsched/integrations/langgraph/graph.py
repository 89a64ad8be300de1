"""Graph inspection: which nodes of a LangGraph ``StateGraph`` agentsched places, and the DAG.

* **Tasks** are the placeable nodes (``tool_node`` / ``@placeable``), in the graph's node order.
* **Host nodes** are every other node (LLM calls, routers, plain functions): they run as they
  are, on the host, and are timed as host work.
* **Edges**: the graph's static edges (``add_edge``, including ``add_edge([a, b], c)`` joins),
  conditional edges (``add_conditional_edges`` with a ``path_map`` or a ``Literal`` return type)
  and ``Command`` destinations (``add_node(..., destinations=...)``) to every target they may
  take. Host nodes are contracted: task ``a`` -> host ``h`` -> task ``b`` gives ``a -> b``.
  A task reachable from START only through a conditional edge *may* run: the placement still
  covers it (``GraphSpec.conditional``).
* Refused with a one-line ``GraphError`` naming the node: a cycle (even through a conditional
  edge), a conditional edge whose destinations are not declared, an ``agentsched.Tool`` class
  added as a node without ``tool_node``, a subgraph holding placeable nodes, one Tool instance
  used by two nodes, a ``reads``/``writes`` key or predecessor output missing from the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from agentsched.errors import WorkflowError
from agentsched.integrations.langgraph.nodes import PlaceableNode, ToolNode
from agentsched.model.tool import Tool

START = "__start__"  # langgraph.graph.START / END, spelled here so inspection needs no import
END = "__end__"


class GraphError(WorkflowError):
    """A LangGraph graph agentsched cannot place: the message names the node."""


@dataclass(frozen=True)
class TaskInputs:
    """Where one task's ``inputs`` come from."""

    invocation: bool  # True: the invocation's arguments (a node after START)
    keys: tuple[tuple[str, str], ...]  # (input name, state key): predecessors' outputs or ``reads``


@dataclass(frozen=True)
class GraphSpec:
    """What agentsched sees of a LangGraph graph (see the module docstring)."""

    nodes: dict[str, PlaceableNode]  # task id (node name) -> its placeable node, in node order
    host_nodes: tuple[str, ...]  # nodes that run as they are (timed as host work)
    edges: tuple[tuple[str, str], ...]  # the task DAG, host nodes contracted
    conditional: frozenset[str]  # tasks that may not run (reached only through a conditional edge)
    inputs: dict[str, TaskInputs]  # per task: where its inputs come from
    node_edges: tuple[tuple[str, str, bool], ...] = field(default=())  # (from, to, conditional), all nodes

    @property
    def task_ids(self) -> list[str]:
        return list(self.nodes)

    def tools(self) -> dict[str, type[Tool]]:
        """Task id -> the Tool class describing it (name, workload, tags, has_gpu)."""
        return {t: n.tool_class() for t, n in self.nodes.items()}


def builder_of(graph: Any) -> Any:
    """The ``StateGraph`` of a builder or of a compiled graph; one-line error for anything else."""
    from langgraph.graph import StateGraph

    if isinstance(graph, StateGraph):
        return graph
    builder = getattr(graph, "builder", None)
    if isinstance(builder, StateGraph):
        return builder
    raise GraphError(f"expected a LangGraph StateGraph (or its compiled graph), got {type(graph).__name__}")


def node_callable(spec: Any) -> Any:
    """The object a node was added as (the function, the ``PlaceableNode``, the subgraph...)."""
    runnable = spec.runnable
    return getattr(runnable, "func", None) or getattr(runnable, "afunc", None) or runnable


def inspect_graph(graph: Any) -> GraphSpec:
    """Inspect a ``StateGraph`` (or compiled graph); raise ``GraphError`` naming the node it cannot map."""
    builder = builder_of(graph)
    names = list(builder.nodes)
    placeable: dict[str, PlaceableNode] = {}
    for name in names:
        obj = node_callable(builder.nodes[name])
        _refuse_unmappable(name, obj)
        if isinstance(obj, PlaceableNode):
            placeable[name] = obj
    _refuse_shared_instances(placeable)
    edges = _node_edges(builder)
    _refuse_cycles(names, edges)
    hosts = tuple(n for n in names if n not in placeable)
    return GraphSpec(
        nodes=placeable,
        host_nodes=hosts,
        edges=_contract(placeable, edges),
        conditional=_conditional(placeable, edges),
        inputs={t: _inputs_of(t, n, placeable, edges, builder.channels, names) for t, n in placeable.items()},
        node_edges=tuple(sorted(edges)),
    )


def _refuse_unmappable(name: str, obj: Any) -> None:
    if isinstance(obj, type) and issubclass(obj, Tool):
        raise GraphError(
            f"node {name!r} is the agentsched.Tool class {obj.__qualname__} added as is "
            f"(LangGraph would call its constructor): add tool_node({obj.__qualname__})"
        )
    sub = getattr(obj, "builder", None)
    if sub is not None and hasattr(sub, "nodes"):
        inner = [n for n, s in sub.nodes.items() if isinstance(node_callable(s), PlaceableNode)]
        if inner:
            raise GraphError(
                f"node {name!r} is a subgraph with placeable node(s) {', '.join(inner)}: "
                "agentsched places nodes of the top graph only; add them there"
            )


def _refuse_shared_instances(placeable: Mapping[str, PlaceableNode]) -> None:
    seen: dict[int, str] = {}
    for name, node in placeable.items():
        inst = node.shares_instance()
        if inst is None:
            continue
        if id(inst) in seen:
            raise GraphError(
                f"node {name!r} uses the same {type(inst).__qualname__} instance as node "
                f"{seen[id(inst)]!r}: each node needs its own (or pass the class)"
            )
        seen[id(inst)] = name


def _node_edges(builder: Any) -> set[tuple[str, str, bool]]:
    """Every edge between nodes (START/END included), flagged conditional or not."""
    out = {(a, b, False) for a, b in builder.edges}
    out |= {(a, b, False) for starts, b in builder.waiting_edges for a in starts}
    for source, branches in builder.branches.items():
        for cond, branch in branches.items():
            if branch.ends is None:
                raise GraphError(
                    f"node {source!r}: conditional edge {cond!r} does not declare where it may go: give "
                    "add_conditional_edges a path_map, or its function a Literal[...] return type"
                )
            out |= {(source, b, True) for b in branch.ends.values()}
    for name, spec in builder.nodes.items():
        ends = spec.ends or ()
        targets = ends.values() if isinstance(ends, Mapping) else ends
        out |= {(name, b, True) for b in targets}
        if getattr(spec, "error_handler_node", None):  # LangGraph >= 1.2: runs when the node raises
            out.add((name, spec.error_handler_node, True))
    return out


def _refuse_cycles(names: list[str], edges: set[tuple[str, str, bool]]) -> None:
    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from((a, b) for a, b, _ in edges if a in g and b in g)
    for a, b, _ in edges:
        if a == b and a in g:
            raise GraphError(f"graph has a cycle at node {a!r} ({a} -> {a}): agentsched places acyclic graphs only")
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
    # name the cycle from its node that comes first in the graph, so the message is stable
    order = {n: i for i, n in enumerate(names)}
    loop = [u for u, _ in cycle]
    k = min(range(len(loop)), key=lambda i: order[loop[i]])
    loop = loop[k:] + loop[:k]
    path = " -> ".join([*loop, loop[0]])
    raise GraphError(f"graph has a cycle through node {loop[0]!r} ({path}): agentsched places acyclic graphs only")


def _contract(placeable: Mapping[str, PlaceableNode], edges: set[tuple[str, str, bool]]) -> tuple[tuple[str, str], ...]:
    succ: dict[str, set[str]] = {}
    for a, b, _ in edges:
        succ.setdefault(a, set()).add(b)
    out: list[tuple[str, str]] = []
    for t in placeable:
        seen: set[str] = set()
        stack = list(succ.get(t, ()))
        while stack:
            n = stack.pop()
            if n in seen or n == END:
                continue
            seen.add(n)
            if n in placeable:
                out.append((t, n))
            else:  # a host node: look through it
                stack.extend(succ.get(n, ()))
    order = {t: i for i, t in enumerate(placeable)}
    return tuple(sorted(set(out), key=lambda e: (order[e[0]], order[e[1]])))


def _conditional(placeable: Mapping[str, PlaceableNode], edges: set[tuple[str, str, bool]]) -> frozenset[str]:
    g = nx.DiGraph()
    g.add_node(START)
    g.add_edges_from((a, b) for a, b, cond in edges if not cond)
    always = nx.descendants(g, START)
    return frozenset(t for t in placeable if t not in always)


def _inputs_of(
    task: str,
    node: PlaceableNode,
    placeable: Mapping[str, PlaceableNode],
    edges: set[tuple[str, str, bool]],
    channels: Mapping[str, Any],
    names: list[str],
) -> TaskInputs:
    if isinstance(node, ToolNode):
        out_key = node.writes or task
        if out_key not in channels:
            raise GraphError(
                f"node {task!r} writes its output to state key {out_key!r}, which the graph's "
                "state does not have: add it to the state schema or pass tool_node(..., writes=KEY)"
            )
        if node.reads is not None:
            missing = [k for k in node.reads.values() if k not in channels]
            if missing:
                raise GraphError(
                    f"node {task!r} reads state key(s) {', '.join(missing)} the graph's state does not have"
                )
            return TaskInputs(invocation=False, keys=tuple(node.reads.items()))
    # Walk back through host nodes, as the DAG contracts them: the task gets its predecessor tasks'
    # outputs (as under ``agentsched invoke``), the output of each host node it passes that has a
    # state key of its own name (an LLM step writing ``rewrite``), and the invocation's arguments
    # when START is reached (it is then a source task of the DAG).
    order = {n: i for i, n in enumerate(names)}
    preds: dict[str, set[str]] = {}
    for a, b, _ in edges:
        preds.setdefault(b, set()).add(a)
    found: set[str] = set()
    invocation = False
    stack, seen = list(preds.get(task, ())), set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        if p == START:
            invocation = True
        elif p in placeable:
            found.add(p)
        else:
            if p in channels:
                found.add(p)
            stack.extend(preds.get(p, ()))
    keys = []
    for p in sorted(found, key=order.__getitem__):
        pnode = placeable.get(p)
        key = (pnode.writes or p) if isinstance(pnode, ToolNode) else p
        if key in channels:  # (a tool node's key was checked above; a function node may write others)
            keys.append((p, key))
    return TaskInputs(invocation=invocation, keys=tuple(keys))


def refuse_compile_options(compiled: Any) -> None:
    """A compiled graph whose invocations need a thread or may pause cannot be one invocation."""
    if getattr(compiled, "checkpointer", None) not in (None, False):
        raise GraphError(
            "the graph was compiled with a checkpointer (each invocation would need a "
            "thread_id): give GraphRuntime the StateGraph, or compile it without one"
        )
    paused = list(getattr(compiled, "interrupt_before_nodes", None) or []) + list(
        getattr(compiled, "interrupt_after_nodes", None) or []
    )
    if paused:
        raise GraphError(
            f"the graph was compiled to interrupt at node {paused[0]!r}: agentsched runs an "
            "invocation to its end; compile it without interrupts"
        )
