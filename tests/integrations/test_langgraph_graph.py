"""Graph inspection: tasks, host nodes, the contracted DAG, conditional coverage, refusals."""

from typing import Any, Literal, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command  # noqa: E402

from agentsched.integrations.langgraph import GraphError, inspect_graph, placeable, tool_node  # noqa: E402
from agentsched.model.tool import Tool  # noqa: E402


class Echo(Tool):
    name = "echo"
    workload = "returns its inputs"
    tags = ("compute-light",)

    def run(self, inputs: dict[str, Any]) -> Any:
        return dict(inputs)


class State(TypedDict, total=False):
    q: str
    a: Any
    b: Any
    c: Any
    d: Any
    llm: Any
    out: Any


def host(state: State) -> dict:
    return {"llm": "host"}


def test_tasks_hosts_and_contracted_edges() -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("llm", host)
    g.add_node("b", tool_node(Echo))
    g.add_node("c", tool_node(Echo))
    g.add_edge(START, "a")
    g.add_edge("a", "llm")
    g.add_edge("llm", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], END)
    spec = inspect_graph(g)
    assert spec.task_ids == ["a", "b", "c"]
    assert spec.host_nodes == ("llm",)
    assert spec.edges == (("a", "b"), ("a", "c"))  # a -> llm -> b contracted to a -> b
    assert spec.conditional == frozenset()
    assert spec.inputs["a"].invocation and spec.inputs["a"].keys == ()
    # b gets a's output, and the host node's own key on the way
    assert spec.inputs["b"].keys == (("a", "a"), ("llm", "llm")) and not spec.inputs["b"].invocation
    assert spec.tools() == {"a": Echo, "b": Echo, "c": Echo}


def test_join_edge_and_compiled_graph() -> None:
    g = StateGraph(State)
    for n in "abc":
        g.add_node(n, tool_node(Echo))
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge(["a", "b"], "c")
    g.add_edge("c", END)
    spec = inspect_graph(g.compile())
    assert spec.edges == (("a", "c"), ("b", "c"))
    assert spec.inputs["c"].keys == (("a", "a"), ("b", "b"))


def route(state: State) -> Literal["b", "c"]:
    return "b"


def test_conditional_edges_cover_every_target() -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("b", tool_node(Echo))
    g.add_node("c", tool_node(Echo))
    g.add_node("d", tool_node(Echo))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", route)  # Literal return type: may go to b or c
    g.add_edge("b", "d")
    g.add_edge("c", "d")
    g.add_edge("d", END)
    spec = inspect_graph(g)
    assert spec.task_ids == ["a", "b", "c", "d"]
    assert spec.edges == (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))
    assert spec.conditional == {"b", "c", "d"}


def test_path_map_and_command_destinations() -> None:
    def router(state: State) -> Command[Literal["b"]]:
        return Command(goto="b")

    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("router", router, destinations=("b", "c"))
    g.add_node("b", tool_node(Echo))
    g.add_node("c", tool_node(Echo))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "go", {"go": "router"})
    spec = inspect_graph(g)
    assert spec.host_nodes == ("router",)
    assert spec.edges == (("a", "b"), ("a", "c"))
    assert spec.conditional == {"b", "c"}


def test_undeclared_conditional_targets_refused_naming_the_node() -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("b", tool_node(Echo))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "b")  # no path_map, no Literal: could go anywhere
    with pytest.raises(GraphError, match=r"^node 'a': conditional edge .* path_map") as e:
        inspect_graph(g)
    assert "\n" not in str(e.value)


def test_cycle_refused_naming_a_node() -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("b", tool_node(Echo))
    g.add_node("llm", host)
    g.add_edge(START, "a")
    g.add_edge("a", "llm")
    g.add_edge("llm", "b")
    g.add_conditional_edges("b", lambda s: END, {"again": "llm", END: END})  # agent loop
    with pytest.raises(GraphError) as e:
        inspect_graph(g)
    assert str(e.value) == ("graph has a cycle through node 'b' (b -> llm -> b): agentsched places acyclic graphs only")


def test_self_loop_refused() -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END, ["a", END])
    with pytest.raises(GraphError, match=r"cycle at node 'a' \(a -> a\)"):
        inspect_graph(g)


def test_tool_class_added_as_is_refused() -> None:
    g = StateGraph(State)
    g.add_node("a", Echo)
    g.add_edge(START, "a")
    with pytest.raises(GraphError, match=r"^node 'a' is the agentsched.Tool class Echo .* tool_node\(Echo\)$"):
        inspect_graph(g)


def test_shared_tool_instance_refused() -> None:
    echo = Echo()
    g = StateGraph(State)
    g.add_node("a", tool_node(echo))
    g.add_node("b", tool_node(echo))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    with pytest.raises(GraphError, match=r"^node 'b' uses the same Echo instance as node 'a'"):
        inspect_graph(g)


def test_missing_state_keys_refused() -> None:
    g = StateGraph(State)
    g.add_node("zz", tool_node(Echo))  # its output key 'zz' is not in the state
    g.add_edge(START, "zz")
    with pytest.raises(GraphError, match=r"^node 'zz' writes its output to state key 'zz'"):
        inspect_graph(g)
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo, reads=["q", "nope"]))
    g.add_edge(START, "a")
    with pytest.raises(GraphError, match=r"^node 'a' reads state key\(s\) nope"):
        inspect_graph(g)
    g = StateGraph(State)
    g.add_node("x", tool_node(Echo, writes="out", reads=["q"]))
    g.add_edge(START, "x")
    spec = inspect_graph(g)
    assert spec.inputs["x"].keys == (("q", "q"),) and not spec.inputs["x"].invocation
    g = StateGraph(State)
    g.add_node("a", tool_node(Echo))
    g.add_node("b", tool_node(Echo, reads={"A": "a", "question": "q"}))  # input name -> state key
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    assert inspect_graph(g).inputs["b"].keys == (("A", "a"), ("question", "q"))


def test_subgraph_with_placeable_nodes_refused_plain_subgraph_is_host() -> None:
    inner = StateGraph(State)
    inner.add_node("a", tool_node(Echo))
    inner.add_edge(START, "a")
    g = StateGraph(State)
    g.add_node("sub", inner.compile())
    g.add_edge(START, "sub")
    with pytest.raises(GraphError, match=r"^node 'sub' is a subgraph with placeable node\(s\) a"):
        inspect_graph(g)
    plain = StateGraph(State)
    plain.add_node("llm", host)
    plain.add_edge(START, "llm")
    g = StateGraph(State)
    g.add_node("sub", plain.compile())
    g.add_node("b", tool_node(Echo))
    g.add_edge(START, "sub")
    g.add_edge("sub", "b")
    spec = inspect_graph(g)
    assert spec.host_nodes == ("sub",) and spec.task_ids == ["b"]
    assert spec.inputs["b"].invocation  # START -> sub (host) -> b: a source task of the DAG


def test_function_node_is_a_task() -> None:
    @placeable(workload="doubles", tags=["compute-light"], has_gpu=False)
    def double(state: State, device: str) -> dict:
        return {"out": 2}

    g = StateGraph(State)
    g.add_node(double)
    g.add_edge(START, "double")
    spec = inspect_graph(g)
    assert spec.task_ids == ["double"]
    cls = spec.tools()["double"]
    assert (cls.name, cls.workload, cls.tags, cls.has_gpu) == ("double", "doubles", ("compute-light",), False)


def test_not_a_graph() -> None:
    with pytest.raises(GraphError, match="expected a LangGraph StateGraph"):
        inspect_graph(object())
