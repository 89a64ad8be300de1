"""GraphRuntime and the LangGraph example refuse bad input in one line, before any work."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from agentsched.errors import AgentschedError  # noqa: E402
from agentsched.integrations.langgraph import GraphInputError, GraphRuntime, tool_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "langgraph_rag" / "run.py"

TOOLS = textwrap.dedent("""
    from agentsched import Tool


    class Upper(Tool):
        name = "upper"
        workload = "upper-case a text"
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            return inputs["text"].upper()
""")


class State(TypedDict, total=False):
    text: Any
    upper: Any


@pytest.fixture
def graph(tmp_path, monkeypatch):
    (tmp_path / "lg_input_tools.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    import sys

    from agentsched.model.tool import tool_class

    tool_class("lg_input_tools:Upper")
    g = StateGraph(State)
    g.add_node("upper", tool_node(sys.modules["lg_input_tools"].Upper))
    g.add_edge(START, "upper")
    g.add_edge("upper", END)
    yield g, tmp_path
    sys.modules.pop("lg_input_tools", None)


@pytest.mark.parametrize("bad", ["not a dict", 42, ["text", "a"]])
def test_input_that_is_not_a_mapping_is_one_line(graph, bad):
    g, folder = graph
    with GraphRuntime(g, "upper", store=str(folder / "s.db")) as rt:
        with pytest.raises(
            GraphInputError,
            match=r"^graph input must be a mapping of state keys to values "
            rf"\(e\.g\. \{{'question': \.\.\.\}}\), got {type(bad).__name__}$",
        ):
            rt.invoke(bad)
        r = rt.invoke({"text": "still works"})  # nothing was consumed by the refused call
        assert r.ok and r.state["upper"] == "STILL WORKS" and r.invocation_id == 1
    assert issubclass(GraphInputError, AgentschedError)


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_rag_run_args", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("value", ["-1", "0"])
def test_example_rejects_fewer_than_one_invocation(value, capsys):
    with pytest.raises(SystemExit) as e:
        _example().main(["--invocations", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument --invocations: must be >= 1, got {value}" in err


def test_example_with_a_store_in_a_missing_folder_is_one_line(tmp_path, capsys):
    store = tmp_path / "nonexistent" / "x.db"
    assert _example().main(["--store", str(store), "--invocations", "1"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [f"error: store {store} cannot be created: folder {store.parent} does not exist"]
