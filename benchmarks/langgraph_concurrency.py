"""A LangGraph graph served to many clients at once: concurrent invocations against one at a time.

    python benchmarks/langgraph_concurrency.py [--clients 8] [--invocations 120] [--quick]

``GraphRuntime.invoke`` called from ``--clients`` threads at once (each sends its next invocation
when its last is answered: a closed loop), side by side in one run:

* **concurrent** (what ships): the invocations of a round run at once and share the graph's tools,
  CPU slots, GPU queue and VRAM (integrations/langgraph/machine.py);
* **one at a time**: the same graph and runtime with the testbed's ``concurrent_runs`` off, so the
  runtime runs one invocation at a time (what the adapter did before).

The graph: a RAG-shaped chain ``parse -> embed -> rerank`` of placeable nodes plus one host node
(``llm``). This machine has no GPU and 2 cores, so each tool's work is a fixed sleep (parse 30 ms,
embed 60 ms, rerank 40 ms, llm 80 ms): it measures the adapter's concurrency, not a model's
speed. ``embed`` says ``concurrent_safe`` (one instance serves several calls at once); ``parse``
and ``rerank`` do not (one call at a time per instance: invocations pipeline through them).
4 CPU slots, ``round_size`` = the number of clients.

Reported: throughput (invocations/s), client latency p50/p99 (ms), and the ratios concurrent /
one at a time. Target: throughput >= 2x with 8 clients (the chain's slowest exclusive stage, 40 ms,
against 210 ms per invocation one at a time, bounds it near 5x; the rounds' barriers cost some);
every invocation answered ok, each with its own state.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, TypedDict

from agentsched.experiments.traffic import percentile
from agentsched.integrations.langgraph import GraphRuntime, LangGraphTestbed, tool_node
from agentsched.model.tool import Tool

SLEEP_MS = {"parse": 30, "embed": 60, "rerank": 40, "llm": 80}
CPU_SLOTS = 4
TARGET_THROUGHPUT_RATIO = 2.0


class State(TypedDict, total=False):
    question: Any
    parse: Any
    embed: Any
    rerank: Any
    llm: Any


def _nap(task: str) -> None:
    time.sleep(SLEEP_MS[task] / 1000.0)


class Parse(Tool):
    name, has_gpu, workload = "parse", False, "split the question into terms"
    input_names = ("question",)

    def run(self, inputs: dict[str, Any]) -> Any:
        _nap("parse")
        return inputs["question"].split()


class Embed(Tool):
    name, workload, tags = "embed", "embed the terms", ("compute-bound", "transformer")
    concurrent_safe = True

    def run(self, inputs: dict[str, Any]) -> Any:
        _nap("embed")
        return [len(t) for t in inputs["parse"]]


class Rerank(Tool):
    name, workload, tags = "rerank", "order the terms", ("compute-bound", "transformer")

    def run(self, inputs: dict[str, Any]) -> Any:
        _nap("rerank")
        return sorted(inputs["embed"])


def llm(state: State) -> dict[str, Any]:
    _nap("llm")
    return {"llm": f"answer to {state['question']}: {state['rerank']}"}


def build_graph() -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    g.add_node("parse", tool_node(Parse))
    g.add_node("embed", tool_node(Embed))
    g.add_node("rerank", tool_node(Rerank))
    g.add_node("llm", llm)
    g.add_edge(START, "parse")
    g.add_edge("parse", "embed")
    g.add_edge("embed", "rerank")
    g.add_edge("rerank", "llm")
    g.add_edge("llm", END)
    return g


class OneAtATime(LangGraphTestbed):
    concurrent_runs = False  # the runtime then runs one invocation at a time


def serve(testbed_cls: type[LangGraphTestbed], clients: int, invocations: int, store: str) -> dict[str, Any]:
    """``invocations`` in all from ``clients`` closed-loop threads; throughput, latencies, failures."""
    bed = testbed_cls(build_graph(), cpu_workers=CPU_SLOTS)
    latencies: list[float] = []
    wrong: list[str] = []
    todo = iter(range(invocations))
    lock = threading.Lock()

    def client(rt: GraphRuntime) -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            question = f"question number {i}"
            t0 = time.perf_counter()
            r = rt.invoke(question=question)
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(ms)
                if not r.ok or not str(r.state["llm"]).startswith(f"answer to {question}:"):
                    wrong.append(r.message or "a state that is not its own")

    with GraphRuntime(build_graph(), "bench-graph", store=store, round_size=clients, testbed=bed) as rt:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(rt,)) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall_s = time.perf_counter() - t0
    bed.close()  # (the runtime leaves a testbed passed in to its caller)
    return {
        "throughput_per_s": len(latencies) / wall_s,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "mean_ms": statistics.fmean(latencies),
        "answered": len(latencies),
        "wrong": wrong,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--invocations", type=int, default=120)
    ap.add_argument("--quick", action="store_true", help="40 invocations")
    args = ap.parse_args(argv)
    n = 40 if args.quick else args.invocations
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, cls in (("one at a time", OneAtATime), ("concurrent", LangGraphTestbed)):
            rows[label] = serve(cls, args.clients, n, f"{tmp}/{label.replace(' ', '_')}.db")
    print(f"{n} invocations from {args.clients} clients, {CPU_SLOTS} CPU slots, sleeps {SLEEP_MS} ms")
    print(f"{'':16} {'inv/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'ok':>5} {'wrong':>5}")
    for label, r in rows.items():
        print(
            f"{label:16} {r['throughput_per_s']:8.2f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} "
            f"{r['answered'] - len(r['wrong']):5d} {len(r['wrong']):5d}"
        )
    one, conc = rows["one at a time"], rows["concurrent"]
    ratio = conc["throughput_per_s"] / one["throughput_per_s"]
    print(
        f"concurrent / one at a time: throughput {ratio:.2f}x, p50 {conc['p50_ms'] / one['p50_ms']:.2f}x, "
        f"p99 {conc['p99_ms'] / one['p99_ms']:.2f}x"
    )
    ok = ratio >= TARGET_THROUGHPUT_RATIO and not conc["wrong"] and not one["wrong"]
    print(
        f"target: throughput >= {TARGET_THROUGHPUT_RATIO:g}x, every answer ok and its own: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
