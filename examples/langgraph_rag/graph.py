"""The retrieval-augmented answering pipeline of ``examples/rag`` written as a LangGraph graph.

Same tools (``examples/rag/rag_tools.py``), same DAG as ``examples/rag/rag.yaml``; the graph names
its state keys after what they hold and maps them onto the tools' input names with ``reads``. One
host node, ``reply``, stands for an LLM writing the final reply: agentsched does not place it, it
times it.

    START -> passages -> index ----\\
    START -> query ----------------+-> candidates -> ranked -> answer -> reply -> END
"""

# no ``from __future__ import annotations``: LangGraph reads RagState's annotations, and this module
# may be loaded from its file (not through sys.modules), where postponed ones cannot be resolved
from types import ModuleType
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agentsched.integrations.langgraph import tool_node


class RagState(TypedDict, total=False):
    docs: str  # invocation argument: a folder of PDFs
    question: str  # invocation argument
    passages: Any  # ExtractText: [{doc, text}]
    index: Any  # EmbedPassages: passages and their MiniLM vectors
    query: Any  # EmbedQuestion: the question's vector
    candidates: Any  # VectorSearch: the top-k passages
    ranked: Any  # Rerank
    answer: Any  # AssembleAnswer: {question, answer, source, also, score}
    reply: str  # host node: the reply text


def reply(state: RagState) -> dict[str, Any]:
    """Host work (in a real graph an LLM call): the reply sentence, with its sources."""
    a = state["answer"]
    return {"reply": f"{a['answer']} [source: {a['source']}; see also {', '.join(a['also'])}]"}


def build_graph(rag_tools: ModuleType) -> StateGraph:
    """The graph over the tool classes of ``rag_tools`` (examples/rag/rag_tools.py)."""
    g = StateGraph(RagState)
    g.add_node("passages", tool_node(rag_tools.ExtractText))  # after START: gets {docs, question}
    g.add_node("query", tool_node(rag_tools.EmbedQuestion))
    g.add_node("index", tool_node(rag_tools.EmbedPassages, reads={"A": "passages"}))
    g.add_node("candidates", tool_node(rag_tools.VectorSearch, reads={"B": "index", "Q": "query"}))
    g.add_node("ranked", tool_node(rag_tools.Rerank, reads={"C": "candidates"}))
    g.add_node("answer", tool_node(rag_tools.AssembleAnswer, reads={"D": "ranked"}))
    g.add_node("reply", reply)
    g.add_edge(START, "passages")
    g.add_edge(START, "query")
    g.add_edge("passages", "index")
    g.add_edge(["index", "query"], "candidates")
    g.add_edge("candidates", "ranked")
    g.add_edge("ranked", "answer")
    g.add_edge("answer", "reply")
    g.add_edge("reply", END)
    return g
