"""Placeable LangGraph nodes: what a graph author writes so agentsched can place a node.

Two kinds, both plain LangGraph nodes (``graph.add_node(name, node)``):

* ``tool_node(MyTool)``: an ``agentsched.Tool`` (class or instance) as a node. Its ``run`` gets
  the same ``inputs`` as under ``agentsched invoke`` (each predecessor's output, or the
  invocation's arguments for a node after START); its output is written to the state key named
  after the node (``writes=`` to change it).
* ``@placeable(workload=..., tags=..., has_gpu=..., load=...)``: a plain node function
  ``fn(state, device[, model]) -> update``; ``load(device)`` builds what it computes with (its
  result is passed as ``model``), ``device`` is ``"cpu"`` or ``"cuda:N"``.

Under the adapter (``GraphRuntime``) a node runs on the device agentsched chose for that
invocation. Outside it (the user's own ``graph.compile().invoke``) it runs on the CPU, so the
graph stays an ordinary LangGraph graph.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig  # comes with langgraph

from agentsched.errors import AgentschedError, one_line
from agentsched.model.tool import Tool

#: key of ``config["configurable"]`` under which the adapter passes its per-invocation run context
CONTEXT_KEY = "__agentsched__"


class NodeError(AgentschedError):
    """A placeable node is declared wrongly (not a Tool, an async function, bad reads/writes)."""


class PlaceableNode:
    """Base of the nodes agentsched can place. Callable as a LangGraph node ``(state, config)``."""

    def new_tool(self) -> Tool:
        """A fresh ``Tool`` to run this node for one task (one per task, loaded where placed)."""
        raise NotImplementedError

    def tool_class(self) -> type[Tool]:
        """The ``Tool`` class whose name, workload, tags and ``has_gpu`` describe this node."""
        raise NotImplementedError

    def shares_instance(self) -> Tool | None:
        """The user's own Tool instance when the node holds one (it cannot serve two tasks)."""
        return None

    def update(self, node: str, output: Any) -> Any:
        """The LangGraph state update for this node's ``output``."""
        raise NotImplementedError

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> Any:
        node = (config.get("metadata") or {}).get("langgraph_node", "")
        ctx = (config.get("configurable") or {}).get(CONTEXT_KEY)
        if ctx is not None:  # under the adapter: run where the invocation's mapping places it
            return ctx.run_node(node, state)
        return self._standalone(node, state)

    # ---- outside the adapter: the host, one lazily loaded tool -----------------------------
    _lock: threading.Lock
    _host_tool: Tool | None

    def _standalone(self, node: str, state: Mapping[str, Any]) -> Any:
        with self._lock:
            if self._host_tool is None:
                tool = self.new_tool()
                tool.load("cpu")
                self._host_tool = tool
        return self.update(node, self._host_tool.run(self.standalone_inputs(state)))

    def standalone_inputs(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs outside the adapter, which knows no predecessors: the state's set keys."""
        return {k: v for k, v in state.items() if v is not None}


class ToolNode(PlaceableNode):
    """An ``agentsched.Tool`` used as a LangGraph node."""

    def __init__(
        self,
        tool: type[Tool] | Tool,
        *,
        reads: Iterable[str] | Mapping[str, str] | None = None,
        writes: str | None = None,
    ) -> None:
        if isinstance(tool, type):
            if not issubclass(tool, Tool):
                raise NodeError(f"tool_node: {tool.__qualname__} is not an agentsched.Tool subclass")
            if inspect.isabstract(tool):
                raise NodeError(f"tool_node: {tool.__qualname__} does not implement run(inputs)")
        elif not isinstance(tool, Tool):
            raise NodeError(f"tool_node: a {type(tool).__name__} object is not an agentsched.Tool")
        if isinstance(reads, str):
            raise NodeError(f"tool_node: reads must be a list of state keys, not the string {reads!r}")
        if reads is not None and not isinstance(reads, (Mapping, list, tuple, set, frozenset)):
            raise NodeError(
                f"tool_node: reads must be a list of state keys or a dict of input name to key, "
                f"got {type(reads).__name__}"
            )
        if writes is not None and not isinstance(writes, str):
            raise NodeError(f"tool_node: writes must be a state key (a string), got {type(writes).__name__}")
        self.tool = tool  # the class (one instance per task) or the user's own instance
        #: input name -> state key whose value ``inputs`` carries under that name; None: the
        #: node's predecessors (a list of keys reads each key under its own name)
        self.reads: dict[str, str] | None = None
        if reads is not None:
            self.reads = (
                {str(k): str(v) for k, v in reads.items()}
                if isinstance(reads, Mapping)
                else {str(k): str(k) for k in reads}
            )
        self.writes = writes  # state key of the output; None: the node's name
        self._lock = threading.Lock()
        self._host_tool = None

    def new_tool(self) -> Tool:
        if not isinstance(self.tool, type):
            return self.tool
        try:
            return self.tool()
        except Exception as e:  # noqa: BLE001 - user code: one line
            raise NodeError(f"tool_node: {self.tool.__qualname__}() failed: {one_line(e)}") from None

    def tool_class(self) -> type[Tool]:
        return self.tool if isinstance(self.tool, type) else type(self.tool)

    def shares_instance(self) -> Tool | None:
        return None if isinstance(self.tool, type) else self.tool

    def update(self, node: str, output: Any) -> dict[str, Any]:
        return {self.writes or node: output}

    def standalone_inputs(self, state: Mapping[str, Any]) -> dict[str, Any]:
        if self.reads is not None:
            return {name: state.get(key) for name, key in self.reads.items()}
        return super().standalone_inputs(state)

    def __repr__(self) -> str:
        return f"tool_node({self.tool_class().__qualname__})"


def tool_node(
    tool: type[Tool] | Tool, *, reads: Iterable[str] | Mapping[str, str] | None = None, writes: str | None = None
) -> ToolNode:
    """A LangGraph node running ``tool`` where agentsched places it.

    ``reads``: the state keys passed as ``inputs``, a list (each under its own name) or a dict
    input name -> state key (a tool written for a workflow's task ids, ``{"A": "extract"}``);
    default: each predecessor's output, or the invocation's arguments after START, exactly as
    ``agentsched invoke`` passes them;
    ``writes``: the state key of the output (default: the node's name)."""
    return ToolNode(tool, reads=reads, writes=writes)


class FunctionTool(Tool):
    """The ``Tool`` behind a ``@placeable`` function: ``run(state)`` calls the function on the
    device it was loaded on. Subclassed per function (class attributes carry its description)."""

    fn: Callable[..., Any]
    load_fn: Callable[[str], Any] | None = None
    unload_fn: Callable[[Any], None] | None = None

    def __init__(self) -> None:
        self.device: str | None = None  # where it is loaded
        self.model: Any = None  # what load(device) returned

    def load(self, device: str) -> None:
        self.model = type(self).load_fn(device) if type(self).load_fn is not None else None
        self.device = device

    def run(self, inputs: dict[str, Any]) -> Any:
        fn = type(self).fn
        device = self.device or "cpu"
        if type(self).load_fn is not None:
            return fn(inputs, device, self.model)
        return fn(inputs, device)

    def unload(self) -> None:
        if type(self).unload_fn is not None and self.model is not None:
            type(self).unload_fn(self.model)
        self.model = None
        self.device = None


class FunctionNode(PlaceableNode):
    """A plain node function ``fn(state, device[, model]) -> update`` that agentsched places."""

    def __init__(self, fn: Callable[..., Any], tool_cls: type[FunctionTool]) -> None:
        self.fn = fn  # the user's function
        self.tool_cls = tool_cls  # its Tool class (name, workload, tags, has_gpu)
        self._lock = threading.Lock()
        self._host_tool = None
        self.__name__ = getattr(fn, "__name__", tool_cls.name)  # LangGraph names nodes by it
        self.__doc__ = fn.__doc__

    def new_tool(self) -> Tool:
        return self.tool_cls()

    def tool_class(self) -> type[Tool]:
        return self.tool_cls

    def update(self, node: str, output: Any) -> Any:
        return output

    def standalone_inputs(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return dict(state)

    def __repr__(self) -> str:
        return f"placeable({self.__name__})"


def placeable(
    fn: Callable[..., Any] | None = None,
    *,
    workload: str = "",
    tags: Iterable[str] = (),
    has_gpu: bool = True,
    load: Callable[[str], Any] | None = None,
    unload: Callable[[Any], None] | None = None,
    name: str | None = None,
) -> Any:
    """Declare a plain LangGraph node function placeable (decorator, with or without arguments).

    ``fn(state, device) -> update``, or ``fn(state, device, model) -> update`` when ``load`` is
    given: ``load(device)`` builds what the function computes with (called once per placement,
    before the invocation's clock for warm placements), ``unload(model)`` frees it. ``workload``
    (one line) and ``tags`` describe the node to cold-start schedulers; ``has_gpu=False`` says a
    GPU placement would run the same host code."""
    if isinstance(tags, str):
        raise NodeError(f"placeable: tags must be a list, not the string {tags!r}")
    tag_tuple = tuple(str(t) for t in tags)

    def wrap(f: Callable[..., Any]) -> FunctionNode:
        if not callable(f):
            raise NodeError(f"placeable: {f!r} is not a function")
        if inspect.iscoroutinefunction(f):
            raise NodeError(f"placeable: {getattr(f, '__name__', f)} is async; placeable nodes are sync")
        arity = 3 if load is not None else 2
        _check_arity(f, arity)
        tool_name = name or getattr(f, "__name__", "node")
        attrs = {
            "name": tool_name,
            "workload": workload,
            "tags": tag_tuple,
            "has_gpu": bool(has_gpu),
            "fn": staticmethod(f),
            "load_fn": staticmethod(load) if load else None,
            "unload_fn": staticmethod(unload) if unload else None,
            "__module__": getattr(f, "__module__", __name__),
            "__qualname__": f"{getattr(f, '__qualname__', tool_name)}.Tool",
        }
        return FunctionNode(f, type(f"{tool_name}_tool", (FunctionTool,), attrs))

    return wrap if fn is None else wrap(fn)


def _check_arity(f: Callable[..., Any], arity: int) -> None:
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return  # builtins: trust the caller
    try:
        sig.bind(*range(arity))
    except TypeError:
        want = "state, device, model" if arity == 3 else "state, device"
        raise NodeError(f"placeable: {getattr(f, '__name__', f)} must take ({want})") from None
