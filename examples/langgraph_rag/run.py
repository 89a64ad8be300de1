"""Run the LangGraph version of examples/rag with agentsched placing its tool nodes.

    python examples/langgraph_rag/run.py                 # 8 invocations, store langgraph_rag.db
    python examples/langgraph_rag/run.py --compare       # and the YAML pipeline through Runtime.invoke
    agentsched history rag-langgraph --store langgraph_rag.db

Each line: the invocation, where each tool node ran, the graph's E2E (host node included) and the
answer's source document. ``--compare`` runs examples/rag/rag.yaml through ``agentsched.Runtime``
(what ``agentsched invoke`` runs) on the same questions and checks that the answers are equal.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAG = HERE.parent / "rag"  # the runtime example: rag_tools.py, rag.yaml, make_docs.py

QUESTIONS = [
    "When did the Harbor Bridge open?",
    "How many books does the central library hold?",
    "How long can the solar plant keep producing power after sunset?",
    "How often do trains run in winter?",
    "What destroyed the cherry blossoms?",
]


def _load(path: Path, name: str):  # noqa: ANN202 - a module
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # so the runtime's tool paths (rag_tools:Class) resolve to these classes
    spec.loader.exec_module(mod)
    return mod


def _at_least_one(text: str) -> int:
    """argparse type: an integer >= 1 (0 or -1 invocations would silently do nothing)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--invocations", type=_at_least_one, default=8)
    ap.add_argument("--store", default="langgraph_rag.db")
    ap.add_argument("--round-size", type=_at_least_one, default=2)
    ap.add_argument("--policy", default=None, help="default: agent-plan (agent-plan-cold while a node has no card)")
    ap.add_argument("--compare", action="store_true", help="also run rag.yaml through Runtime.invoke")
    args = ap.parse_args(argv)

    from agentsched.errors import AgentschedError

    try:
        return _run(args)
    except AgentschedError as e:  # a bad store, policy, ...: one line, as the agentsched CLI prints it
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from agentsched.errors import StoreError
    from agentsched.integrations.langgraph import GraphRuntime

    store = Path(args.store)
    if not store.parent.is_dir():  # checked before the tools load and the documents are written
        raise StoreError(f"store {store} cannot be created: folder {store.parent} does not exist")

    rag_tools = _load(RAG / "rag_tools.py", "rag_tools")
    graph = _load(HERE / "graph.py", "langgraph_rag_graph").build_graph(rag_tools)
    docs = RAG / "docs"
    if not any(docs.glob("*.pdf")):
        _load(RAG / "make_docs.py", "rag_make_docs").main(str(docs))

    answers = []
    with GraphRuntime(graph, "rag-langgraph", store=str(store), policy=args.policy, round_size=args.round_size) as rt:
        for i in range(args.invocations):
            q = QUESTIONS[i % len(QUESTIONS)]
            r = rt.invoke({"docs": str(docs), "question": q})
            where = " ".join(f"{t}={m.value}" for t, m in r.mapping.items())
            if not r.ok:
                print(f"#{r.invocation_id} round {r.round} {r.kind}: {r.status.value}: {r.message}")
                continue
            host = sum(h["end_ms"] - h["start_ms"] for h in r.host_spans)
            print(
                f"#{r.invocation_id} round {r.round} {r.kind}: {where} | E2E {r.e2e_ms:.1f} ms "
                f"(host {host:.1f} ms) | {r.state['answer']['source']}"
            )
            answers.append((q, r.state["answer"]))
    if args.compare:
        from agentsched.runtime import Runtime

        with Runtime(str(RAG / "rag.yaml"), store=None, testbed="local", round_size=args.round_size) as yrt:
            same = 0
            for q, a in answers:
                y = yrt.invoke(docs=str(docs), question=q)
                same += y.ok and y.outputs.get("E") == a
            print(f"answers equal to rag.yaml through Runtime.invoke: {same}/{len(answers)}")
            return 0 if same == len(answers) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
