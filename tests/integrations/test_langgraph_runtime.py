"""GraphRuntime: a LangGraph graph through agentsched.Runtime, against the same pipeline run with
``agentsched invoke`` (Runtime.invoke on its YAML workflow), with the real langgraph and SQLite.

The tools live in a module written to a new folder, as a user would, imported from the current
directory (the runtime's rule for import paths)."""

import json
import textwrap
import threading
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from agentsched.integrations.langgraph import GraphError, GraphRuntime, tool_node  # noqa: E402
from agentsched.model.execution import Status  # noqa: E402
from agentsched.model.tool import Tool  # noqa: E402

TOOLS = '''
import threading

from agentsched import Tool


class Split(Tool):
    name = "split"
    workload = "split each document into lower-case words"
    tags = ("compute-light",)
    has_gpu = False
    input_names = ("documents",)

    def run(self, inputs):
        if any("FAIL" in d for d in inputs["documents"]):
            raise ValueError("a document says FAIL")
        return [d.lower().split() for d in inputs["documents"]]


class Count(Tool):
    name = "count"
    workload = "word counts"
    tags = ("compute-light",)

    def load(self, device):
        self.device = device

    def run(self, inputs):
        counts = {}
        for words in inputs["split"]:
            for w in words:
                counts[w] = counts.get(w, 0) + 1
        return counts


class Longest(Tool):
    name = "longest"
    workload = "longest word per document"

    def run(self, inputs):
        return [max(words, key=len) if words else "" for words in inputs["split"]]


class Where(Tool):
    name = "where"
    workload = "reports the device it was loaded on"
    tags = ("compute-bound",)

    def load(self, device):
        self.device = device

    def unload(self):
        self.device = None

    def run(self, inputs):
        return self.device


class Meet(Tool):
    """Passes only when two invocations are inside run at once (their requests overlap)."""

    name = "meet"
    workload = "waits for a second invocation"
    has_gpu = False
    concurrent_safe = True
    barrier = threading.Barrier(2, timeout=10)

    def run(self, inputs):
        type(self).barrier.wait()
        return sum(len(words) for words in inputs["split"])


class Report(Tool):
    name = "report"
    workload = "join the counts and the longest words"
    has_gpu = False

    def run(self, inputs):
        top = sorted(inputs["count"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        return {"top": top, "longest": inputs["longest"]}
'''

YAML = """
name: words
decision_space: three_way
tasks:
  split: {tool: "pipe_tools:Split"}
  count: {tool: "pipe_tools:Count"}
  longest: {tool: "pipe_tools:Longest"}
  report: {tool: "pipe_tools:Report"}
edges: [[split, count], [split, longest], [count, report], [longest, report]]
"""

DOCS = [
    ["the cat sat on the mat", "a dog"],
    ["Graphs of tools", "placement matters the most"],
    ["one", "two two", "three three three"],
]


class State(TypedDict, total=False):
    documents: Any
    split: Any
    count: Any
    longest: Any
    report: Any
    note: Any
    meet: Any


@pytest.fixture
def pipe(tmp_path, monkeypatch):
    """The user's folder: a tool module and the YAML workflow; the current directory is it."""
    (tmp_path / "pipe_tools.py").write_text(textwrap.dedent(TOOLS))
    (tmp_path / "words.yaml").write_text(YAML)
    monkeypatch.chdir(tmp_path)
    import sys

    from agentsched.model.tool import tool_class

    tool_class("pipe_tools:Split")  # imported as the runtime imports a tool path: from the current directory
    yield tmp_path, sys.modules["pipe_tools"]
    sys.modules.pop("pipe_tools", None)


def words_graph(mod: Any, *, with_host: bool = False) -> StateGraph:
    g = StateGraph(State)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("count", tool_node(mod.Count))
    g.add_node("longest", tool_node(mod.Longest))
    g.add_node("report", tool_node(mod.Report))
    g.add_edge(START, "split")
    if with_host:  # a host step (an LLM call, say) between split and count
        g.add_node("note", lambda s: {"note": "host"})
        g.add_edge("split", "note")
        g.add_edge("note", "count")
    else:
        g.add_edge("split", "count")
    g.add_edge("split", "longest")
    g.add_edge(["count", "longest"], "report")
    g.add_edge("report", END)
    return g


def test_graph_outputs_equal_the_yaml_pipeline_through_invoke(pipe) -> None:
    folder, mod = pipe
    from agentsched.runtime import Runtime
    from agentsched.scenarios import resolve_workflow

    yaml_wf = resolve_workflow(str(folder / "words.yaml"))
    with (
        Runtime(yaml_wf, store=str(folder / "a.db"), testbed="local", round_size=2) as rt,
        GraphRuntime(words_graph(mod), "words-graph", store=str(folder / "a.db"), round_size=2) as grt,
    ):
        assert grt.workflow.task_ids == yaml_wf.task_ids and grt.workflow.edges == yaml_wf.edges
        for docs in DOCS:
            a = rt.invoke(documents=docs)
            b = grt.invoke({"documents": docs})
            assert a.ok and b.ok, (a.message, b.message)
            assert a.outputs == {"report": b.state["report"]} == {"report": b.outputs["report"]}
            assert b.state["split"] == [d.lower().split() for d in docs]
            assert set(b.mapping) == {"split", "count", "longest", "report"}


def test_placements_show_in_history_and_learning_resumes(pipe, cli) -> None:
    folder, mod = pipe
    db = str(folder / "h.db")
    seen = []
    with GraphRuntime(words_graph(mod, with_host=True), "words-graph", store=db, round_size=2) as grt:
        for docs in DOCS:
            r = grt.invoke(documents=docs)
            assert r.ok and [h["node"] for h in r.host_spans] == ["note"]
            seen.append((r.invocation_id, {t: m.value for t, m in r.mapping.items()}, r.e2e_ms))
    with GraphRuntime(words_graph(mod, with_host=True), "words-graph", store=db, round_size=2) as grt:
        r = grt.invoke(documents=DOCS[0])  # a new process on the same store: the history continues
        assert r.ok and r.invocation_id == len(DOCS) + 1
        seen.append((r.invocation_id, {t: m.value for t, m in r.mapping.items()}, r.e2e_ms))
    code, out, err = cli("history", "words-graph", "--store", db, "--json")
    assert code == 0, err
    (learner,) = json.loads(out)["learners"]
    assert learner["settings"]["testbed"] == "langgraph"
    assert learner["task_ids"] == ["split", "count", "longest", "report"]  # the host node is not a task
    got = [(e["invocation_id"], e["mapping"], e["e2e_ms"]) for e in learner["executions"]]
    assert [(i, m) for i, m, _ in got] == [(i, m) for i, m, _ in seen]
    assert all(abs(a - b) < 1e-6 for (_, _, a), (_, _, b) in zip(got, seen, strict=True))


def test_invocations_from_many_threads_run_at_once_and_each_gets_its_own_state(pipe) -> None:
    folder, mod = pipe
    g = StateGraph(State)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("meet", tool_node(mod.Meet))
    g.add_edge(START, "split")
    g.add_edge("split", "meet")
    g.add_edge("meet", END)
    results: dict[int, Any] = {}
    with GraphRuntime(g, "meet-graph", store=str(folder / "m.db"), round_size=2) as grt:

        def call(i: int) -> None:
            results[i] = grt.invoke(documents=DOCS[i])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    for i in range(2):  # both passed the barrier: they ran at once (one at a time, it breaks)
        r = results[i]
        assert r.ok, r.message
        assert r.state["meet"] == sum(len(d.split()) for d in DOCS[i]) == r.outputs["meet"]
        assert r.state["documents"] == DOCS[i]


def test_a_host_node_failing_now_and_then_does_not_fail_the_round_its_mapping_ran(pipe) -> None:
    """An LLM call that raises for one request says nothing of where the tools ran: the request
    fails, its round is judged by the others (a round failed by it would stop the learning)."""
    folder, mod = pipe

    def llm(state: State) -> dict[str, Any]:
        if "HOSTBOOM" in state["documents"]:
            raise RuntimeError("the LLM endpoint timed out")
        return {"note": "answered"}

    g = StateGraph(State)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("note", llm)
    g.add_node("count", tool_node(mod.Count))
    g.add_edge(START, "split")
    g.add_edge("split", "note")
    g.add_edge("note", "count")
    g.add_edge("count", END)
    with GraphRuntime(g, "host-fail", store=str(folder / "hf.db"), round_size=2) as grt:
        answers = [grt.invoke(documents=d) for d in (["a b"], ["HOSTBOOM"], ["c"], ["d e"])]
        rounds = [rec.result for rec in grt.runtime.records]
    assert [a.status for a in answers] == [Status.OK, Status.ERROR, Status.OK, Status.OK]
    assert answers[1].message == "node note (host) failed: RuntimeError: the LLM endpoint timed out"
    assert len(rounds) == 2 and all(r.ok and r.e2e_ms is not None for r in rounds)


def test_a_node_that_raises_fails_that_invocation_and_the_next_runs(pipe) -> None:
    folder, mod = pipe
    with GraphRuntime(words_graph(mod), "words-graph", store=str(folder / "f.db")) as grt:
        bad = grt.invoke(documents=["FAIL here"])
        assert bad.status is Status.ERROR and bad.state is None and bad.e2e_ms is None
        assert bad.message == "node split (split) failed: ValueError: a document says FAIL"
        good = grt.invoke(documents=["fine"])
        assert good.ok and good.state["report"]["longest"] == ["fine"]


def test_graph_the_runtime_cannot_map_is_refused_naming_the_node(pipe) -> None:
    folder, mod = pipe
    g = words_graph(mod)
    g.add_conditional_edges("report", lambda s: END, {"again": "split", END: END})
    with pytest.raises(GraphError, match="^graph has a cycle through node 'split' "):
        GraphRuntime(g, "words-graph", store=str(folder / "c.db"))
    g = StateGraph(State)
    g.add_node("split", mod.Split)  # a Tool class as is, not wrapped
    g.add_edge(START, "split")
    with pytest.raises(GraphError, match="^node 'split' is the agentsched.Tool class Split"):
        GraphRuntime(g, "words-graph", store=str(folder / "c.db"))
    g = StateGraph(State)
    g.add_node("my split", tool_node(mod.Split, writes="split"))  # a name no task may have
    g.add_edge(START, "my split")
    with pytest.raises(GraphError, match="task name 'my split' is not allowed"):  # was a WorkflowError
        GraphRuntime(g, "words-graph", store=str(folder / "c.db"))


def test_missing_input_is_one_line(pipe) -> None:
    folder, mod = pipe
    from agentsched.integrations.langgraph import GraphInputError

    with GraphRuntime(words_graph(mod), "words-graph", store=None) as grt:
        # the caller's input error, as every other (a server maps GraphInputError to its 400)
        with pytest.raises(GraphInputError, match="missing input.*source task split.*documents"):
            grt.invoke(note="no documents")
        # a key the state has not: LangGraph would drop it silently (before, the run went on without it)
        with pytest.raises(
            GraphInputError,
            match="^graph input 'documnets' is not a key of the graph's state "
            r"\(its keys: count, documents, longest, meet, note, report, split\)$",
        ):
            grt.invoke(documnets=["a"])
        with pytest.raises(GraphInputError, match="^graph input 'documents' given twice"):
            grt.invoke({"documents": ["a"]}, documents=["b"])


def test_conditional_graph_learns_over_invocations_that_skip_a_branch(pipe) -> None:
    folder, mod = pipe
    from typing import Literal

    def which(state: State) -> Literal["count", "longest"]:
        return "count" if len(state["documents"]) > 1 else "longest"

    g = StateGraph(State)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("count", tool_node(mod.Count))
    g.add_node("longest", tool_node(mod.Longest))
    g.add_edge(START, "split")
    g.add_conditional_edges("split", which)
    with GraphRuntime(g, "words-branch", store=str(folder / "b.db"), round_size=2) as grt:
        assert grt.workflow.task_ids == ["split", "count", "longest"]  # the placement covers both branches
        for i in range(6):
            docs = ["a b", "c d e"] if i % 2 else ["only one document"]
            r = grt.invoke(documents=docs)
            assert r.ok, r.message
            ran = {s["task"] for s in r.timeline}
            assert ran == ({"split", "count"} if i % 2 else {"split", "longest"})
            assert set(r.mapping) == {"split", "count", "longest"}
            assert r.invocation_id == i + 1


def test_each_node_runs_on_the_device_the_runtime_chose(pipe) -> None:
    folder, mod = pipe
    from agentsched.integrations.langgraph import LangGraphTestbed

    class FakeGpu(LangGraphTestbed):  # tools that only record their device: no CUDA needed
        def _cuda_available(self) -> bool:
            return True

    class WState(TypedDict, total=False):
        documents: Any
        split: Any
        w1: Any
        w2: Any

    g = StateGraph(WState)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("w1", tool_node(mod.Where))
    g.add_node("w2", tool_node(mod.Where))
    g.add_edge(START, "split")
    g.add_edge("split", "w1")
    g.add_edge("split", "w2")
    device = {"cpu": "cpu", "gpu_now": "cuda:0", "gpu_queue": "cuda:0"}
    modes = set()
    with GraphRuntime(
        g, "where", store=str(folder / "w.db"), round_size=1, explore_fraction=0.5, testbed=FakeGpu(g)
    ) as grt:
        for _ in range(8):
            r = grt.invoke(documents=["x"])
            assert r.ok, r.message
            for t in ("w1", "w2"):
                assert r.state[t] == device[r.mapping[t].value]
                modes.add(r.mapping[t].value)
    assert modes - {"cpu"}  # the policy did place nodes on the GPU modes


def _failing_host_graph(mod: Any) -> StateGraph:
    g = StateGraph(State)
    g.add_node("split", tool_node(mod.Split))
    g.add_node("count", tool_node(mod.Count))
    g.add_node("longest", tool_node(mod.Longest))
    g.add_node("report", tool_node(mod.Report))

    def host(state: Any) -> dict:
        if any("BOOM" in d for d in state["documents"]):
            raise RuntimeError("the host step failed")
        return {"note": "host"}

    g.add_node("host", host)
    g.add_edge(START, "split")
    g.add_edge("split", "host")
    g.add_edge("host", "count")
    g.add_edge("split", "longest")
    g.add_edge(["count", "longest"], "report")
    g.add_edge("report", END)
    return g


@pytest.mark.parametrize("policy", ["agent-rules", "agent-plan"])
def test_a_host_node_failing_in_the_first_round_does_not_kill_the_learner(pipe, policy) -> None:
    folder, mod = pipe
    db = str(folder / "host.db")
    with GraphRuntime(_failing_host_graph(mod), "hosted", store=db, round_size=2, policy=policy) as grt:
        bad = grt.invoke(documents=["boom BOOM"])
        assert (
            bad.status is Status.ERROR and bad.message == "node host (host) failed: RuntimeError: the host step failed"
        )
        for docs in DOCS:  # the round ends, the learner observes a round that failed in a host node
            r = grt.invoke(documents=docs)
            assert r.ok, r.message
    with GraphRuntime(_failing_host_graph(mod), "hosted", store=db, round_size=2, policy=policy) as grt:
        r = grt.invoke(documents=DOCS[0])  # a new process replays the store, failure included
        assert r.ok and r.invocation_id == len(DOCS) + 2, r.message


def test_close_takes_the_runtimes_wait(pipe, monkeypatch) -> None:
    """Before, GraphRuntime.close(wait_s=...) was a TypeError that left the runtime open."""
    folder, mod = pipe
    rt = GraphRuntime(words_graph(mod), "words-graph", store=str(folder / "w.db"))
    waits: list[float] = []
    inner = rt.runtime.close
    monkeypatch.setattr(rt.runtime, "close", lambda wait_s: (waits.append(wait_s), inner(wait_s)))
    rt.close(wait_s=0.5)
    assert waits == [0.5]
    with pytest.raises(Exception, match="runtime is closed"):
        rt.invoke(documents=["a b"])


def test_without_cuda_the_runtime_says_every_placement_runs_on_the_host(pipe, caplog) -> None:
    folder, mod = pipe
    from agentsched.integrations.langgraph import LangGraphTestbed
    from agentsched.testbeds.real import NO_CUDA_NOTE

    class NoCuda(LangGraphTestbed):
        def _cuda_available(self) -> bool:
            return False

    class FakeGpu(LangGraphTestbed):
        def _cuda_available(self) -> bool:
            return True

    caplog.set_level("INFO", logger="agentsched")
    g = words_graph(mod)
    bed, fake = NoCuda(g), FakeGpu(g)  # (a testbed passed in is the caller's to close)
    try:
        with GraphRuntime(g, "words-graph", store=None, testbed=bed) as grt:
            assert [r.message for r in caplog.records].count(NO_CUDA_NOTE) == 1  # as Runtime says it
            assert not any(c.has_gpu for c in grt.workflow.task_cards.values())  # the start rules see the host
            assert grt.invoke(documents=["a b"]).ok
        caplog.clear()
        with GraphRuntime(g, "words-graph", store=None, testbed=fake) as grt:
            assert NO_CUDA_NOTE not in [r.message for r in caplog.records]
            assert grt.workflow.task_cards["count"].has_gpu
    finally:
        bed.close()
        fake.close()


def test_a_testbed_kind_name_is_shorthand_as_for_runtime(pipe) -> None:
    """Before, testbed="local" was an internal AttributeError ('str' object has no attribute 'kind')."""
    folder, mod = pipe
    with GraphRuntime(words_graph(mod), "words-graph", store=None, testbed="local") as rt:
        assert rt.invoke(documents=["a b"]).ok
    for kind, message in (
        ("sim", "a LangGraph graph runs on the local testbed (got sim)"),
        ("tpu", "unknown testbed 'tpu' (valid: sim, local, ray)"),
    ):
        with pytest.raises(Exception) as e:
            GraphRuntime(words_graph(mod), "words-graph", store=None, testbed=kind)
        assert str(e.value) == message


class Held(Tool):
    """A long model call: says it started, then stays in run until ``release`` is set."""

    name = "held"
    workload = "waits until released"
    has_gpu = False
    concurrent_safe = True
    input_names = ("x",)
    release = threading.Event()
    started: list[Any] = []
    inside = 0
    lock = threading.Lock()

    def run(self, inputs):
        cls = type(self)
        with cls.lock:
            cls.started.append(inputs["x"])
            cls.inside += 1
        cls.release.wait(30)
        with cls.lock:
            cls.inside -= 1
        return inputs["x"]


def test_close_starts_no_node_call_after_it_and_returns_without_waiting_for_the_calls_running() -> None:
    """Before, a node waiting for a CPU slot started when a running call ended, 6 s after close(0.5),
    and close waited for it (16 s): the testbed's close waited 60 s for calls it cannot stop."""
    from agentsched.testbeds.spec import TestbedSpec

    Held.release.clear()
    Held.started.clear()

    class S(TypedDict, total=False):
        x: Any
        held: Any

    g = StateGraph(S)
    g.add_node("held", tool_node(Held))
    g.add_edge(START, "held")
    g.add_edge("held", END)
    rt = GraphRuntime(g, "held-graph", store=None, round_size=3, testbed=TestbedSpec(kind="local", cpu_slots=2))
    answers: list[str] = []

    def call(i: int) -> None:
        try:
            answers.append(f"ok {rt.invoke(x=i).status}")
        except Exception as e:  # noqa: BLE001 - what the caller is told
            answers.append(str(e))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = threading.Event()
    for _ in range(1000):  # two calls hold the two slots; the third invocation waits for one
        if len(Held.started) == 2 and rt.runtime.in_flight == 3:
            break
        deadline.wait(0.01)
    try:
        rt.close(wait_s=0.1)
        assert Held.inside == 2  # it returned while the calls it cannot stop still run
        for _ in range(1000):  # (a deadline, not a measure)
            if answers:
                break
            deadline.wait(0.01)
        assert answers == ["runtime is closed"]  # the invocation waiting for its node is answered now
    finally:
        Held.release.set()
    for t in threads:
        t.join(30)
    assert len(Held.started) == 2  # the waiting node never started
    assert answers == ["runtime is closed"] * 3


@pytest.mark.parametrize("device", ["tpu:7", 0, "cpu", "cuda:x"])
def test_a_device_that_is_not_a_gpu_is_one_line(pipe, device) -> None:
    folder, mod = pipe
    with pytest.raises(Exception) as e:
        GraphRuntime(words_graph(mod), "words-graph", store=None, device=device)
    assert str(e.value) == f"device must be cuda or cuda:N (where GPU placements run), got {device!r}"
