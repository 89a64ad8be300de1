"""Placeable nodes: declaration errors, and running as plain LangGraph nodes outside the adapter."""

from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from agentsched.integrations.langgraph import NodeError, placeable, tool_node  # noqa: E402
from agentsched.model.tool import Tool  # noqa: E402


class Words(Tool):
    name = "words"

    def __init__(self) -> None:
        self.device = None

    def load(self, device: str) -> None:
        self.device = device

    def run(self, inputs: dict[str, Any]) -> Any:
        return {"device": self.device, "words": sorted(inputs["text"].split())}


class Abstract(Tool):
    name = "abstract"


class State(TypedDict, total=False):
    text: str
    words: Any
    out: Any


def test_tool_node_rejects_what_is_not_a_tool() -> None:
    with pytest.raises(NodeError, match="int object is not an agentsched.Tool"):
        tool_node(3)  # type: ignore[arg-type]
    with pytest.raises(NodeError, match="dict is not an agentsched.Tool subclass"):
        tool_node(dict)  # type: ignore[arg-type]
    with pytest.raises(NodeError, match=r"Abstract does not implement run\(inputs\)"):
        tool_node(Abstract)
    with pytest.raises(NodeError, match="reads must be a list of state keys"):
        tool_node(Words, reads="text")
    # before: a bare TypeError ("'int' object is not iterable")
    with pytest.raises(
        NodeError,
        match=r"^tool_node: reads must be a list of state keys or a dict of input name "
        r"to key, got int$",
    ):
        tool_node(Words, reads=5)  # type: ignore[arg-type]
    with pytest.raises(NodeError, match=r"^tool_node: writes must be a state key \(a string\), got int$"):
        tool_node(Words, writes=5)  # type: ignore[arg-type]


def test_placeable_rejects_bad_declarations() -> None:
    async def coro(state: State, device: str) -> dict:
        return {}

    with pytest.raises(NodeError, match="coro is async"):
        placeable(coro)

    def one(state: State) -> dict:
        return {}

    with pytest.raises(NodeError, match=r"one must take \(state, device\)"):
        placeable(one)

    def two(state: State, device: str) -> dict:
        return {}

    with pytest.raises(NodeError, match=r"two must take \(state, device, model\)"):
        placeable(load=lambda d: d)(two)
    with pytest.raises(NodeError, match="tags must be a list"):
        placeable(workload="w", tags="gpu")


def test_nodes_run_on_the_host_outside_the_adapter() -> None:
    loads: list[str] = []

    def load(device: str) -> str:
        loads.append(device)
        return f"model@{device}"

    @placeable(workload="count words", tags=["compute-light"], load=load)
    def count(state: State, device: str, model: Any) -> dict:
        return {"out": (len(state["words"]["words"]), device, model)}

    g = StateGraph(State)
    g.add_node("words", tool_node(Words, reads=["text"]))
    g.add_node(count)
    g.add_edge(START, "words")
    g.add_edge("words", "count")
    g.add_edge("count", END)
    app = g.compile()
    for _ in range(2):
        state = app.invoke({"text": "b a c"})
        assert state["words"] == {"device": "cpu", "words": ["a", "b", "c"]}
        assert state["out"] == (3, "cpu", "model@cpu")
    assert loads == ["cpu"]  # loaded once, kept


def test_without_langgraph_the_import_is_one_line() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['langgraph'] = None\n"  # as if the extra were not installed
        "try:\n    import agentsched.integrations.langgraph\n"
        "except ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (
        "MissingExtraError agentsched.integrations.langgraph needs LangGraph >= 1.0: "
        "pip install 'agentsched[langgraph]'"
    ), out.stderr
