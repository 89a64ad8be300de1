"""The LangGraph testbed: LangGraph runs the graph, each placeable node runs where the mapping says.

GPU placements are driven with tools that only record the device they were loaded on (no CUDA
here), through a testbed whose CUDA check is replaced, as the local testbed's tests do."""

import threading
from typing import Any, Literal, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from agentsched.errors import TestbedError  # noqa: E402
from agentsched.integrations.langgraph import LangGraphTestbed, placeable, tool_node  # noqa: E402
from agentsched.model.execution import Status  # noqa: E402
from agentsched.model.tool import Tool  # noqa: E402
from agentsched.model.workflow import Mode  # noqa: E402

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE
EVENTS: list[tuple[str, str, str]] = []  # (tool, event, device)


class Recording(Tool):
    """Records load/unload/run with the device; returns its inputs' sorted keys and its device."""

    name = "rec"

    def __init__(self) -> None:
        self.device: str | None = None

    def load(self, device: str) -> None:
        self.device = device
        EVENTS.append((type(self).__name__, "load", device))

    def unload(self) -> None:
        EVENTS.append((type(self).__name__, "unload", self.device or ""))
        self.device = None

    def run(self, inputs: dict[str, Any]) -> Any:
        EVENTS.append((type(self).__name__, "run", self.device or ""))
        return {"device": self.device, "inputs": sorted(inputs)}


class A(Recording):
    name = "a"


class B(Recording):
    name = "b"


class Cq(Recording):
    name = "c"


class D(Recording):
    name = "d"


class State(TypedDict, total=False):
    q: str
    a: Any
    b: Any
    c: Any
    d: Any
    llm: Any
    flag: Any


class FakeGpuTestbed(LangGraphTestbed):
    def _cuda_available(self) -> bool:
        return True


CARDS = {
    "a": {"cpu_ms": 10, "gpu_ms": 1},
    "b": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 600},
    "c": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 500},
    "d": {"cpu_ms": 10, "gpu_ms": 1},
}


def diamond(b: Any = B, c: Any = Cq) -> StateGraph:
    g = StateGraph(State)
    g.add_node("a", tool_node(A))
    g.add_node("b", tool_node(b))
    g.add_node("c", tool_node(c))
    g.add_node("d", tool_node(D))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], "d")
    g.add_edge("d", END)
    return g


@pytest.fixture
def wf(make_workflow):
    return make_workflow(
        CARDS, {t: t for t in "abcd"}, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], space="three_way"
    )


def test_each_node_runs_where_mapped_and_models_stay_warm(wf) -> None:
    EVENTS.clear()
    bed = FakeGpuTestbed(diamond(), cpu_workers=2)
    mapping = {"a": C, "b": N, "c": Q, "d": C}
    for _ in range(2):
        ex = bed.run(wf, mapping, inputs={"q": "hello"})
        assert ex.status is Status.OK, ex.message
        state = bed.last_state
        assert state["a"] == {"device": "cpu", "inputs": ["q"]}  # a source gets the invocation's arguments
        assert state["b"] == {"device": "cuda:0", "inputs": ["a"]}
        assert state["c"] == {"device": "cuda:0", "inputs": ["a"]}
        assert state["d"] == {"device": "cpu", "inputs": ["b", "c"]}
        assert ex.outputs == {t: state[t] for t in "abcd"}
        assert [s.task for s in ex.spans][0] == "a" and {s.task for s in ex.spans} == set("abcd")
        assert {s.task: s.mode for s in ex.spans} == mapping
        assert ex.e2e_ms is not None and ex.e2e_ms >= max(s.end_ms for s in ex.spans)
    loads = [(t, d) for t, e, d in EVENTS if e == "load"]
    # a, b, d loaded once before the first clock; the queued c loads at each admission
    assert loads.count(("A", "cpu")) == 1 and loads.count(("B", "cuda:0")) == 1 and loads.count(("D", "cpu")) == 1
    assert loads.count(("Cq", "cuda:0")) == 2
    assert [e for t, e, _ in EVENTS if t == "Cq"] == ["load", "run", "unload"] * 2
    bed.close()
    assert {t for t, e, _ in EVENTS[-3:] if e == "unload"} == {"A", "B", "D"}


def test_changing_placement_moves_the_tool(wf) -> None:
    EVENTS.clear()
    bed = FakeGpuTestbed(diamond())
    bed.run(wf, {"a": C, "b": C, "c": C, "d": C}, inputs={"q": "x"})
    ex = bed.run(wf, {"a": N, "b": C, "c": C, "d": C}, inputs={"q": "x"})
    assert ex.ok and bed.last_state["a"]["device"] == "cuda:0"
    assert [(e, d) for t, e, d in EVENTS if t == "A"] == [
        ("load", "cpu"),
        ("run", "cpu"),
        ("unload", "cpu"),
        ("load", "cuda:0"),
        ("run", "cuda:0"),
    ]


class Meet(Recording):
    """Both parallel branches must be inside run at once, or the barrier breaks."""

    barrier = threading.Barrier(2, timeout=10)

    def run(self, inputs: dict[str, Any]) -> Any:
        type(self).barrier.wait()
        return super().run(inputs)


class MeetB(Meet):
    name = "b"


class MeetC(Meet):
    name = "c"


def test_independent_branches_run_concurrently(wf) -> None:
    Meet.barrier.reset()
    bed = LangGraphTestbed(diamond(MeetB, MeetC), cpu_workers=2)
    ex = bed.run(wf, {t: C for t in "abcd"}, inputs={"q": "x"})
    assert ex.status is Status.OK, ex.message


class Solo(Recording):
    """Counts queued tools inside run at once; a second one arriving while one runs waits a bit."""

    lock = threading.Lock()
    inside = 0
    most = 0

    def run(self, inputs: dict[str, Any]) -> Any:
        with Solo.lock:
            Solo.inside += 1
            Solo.most = max(Solo.most, Solo.inside)
        threading.Event().wait(0.2)  # gives the other branch time to enter if the queue let it
        with Solo.lock:
            Solo.inside -= 1
        return super().run(inputs)


class SoloB(Solo):
    name = "b"


class SoloC(Solo):
    name = "c"


def test_gpu_queue_runs_one_node_at_a_time(wf) -> None:
    Solo.most = 0
    bed = FakeGpuTestbed(diamond(SoloB, SoloC), cpu_workers=2)
    ex = bed.run(wf, {"a": C, "b": Q, "c": Q, "d": C}, inputs={"q": "x"})
    assert ex.ok and Solo.most == 1
    Solo.most = 0
    ex = bed.run(wf, {"a": C, "b": C, "c": C, "d": C}, inputs={"q": "x"})
    assert ex.ok and Solo.most == 2  # the same graph on the CPU overlaps them (the check can fail)


def test_gpu_now_over_the_budget_ends_the_invocation_as_oom(make_workflow) -> None:
    wf = make_workflow(
        CARDS, {t: t for t in "abcd"}, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], space="three_way", budget=1000
    )
    Meet.barrier.reset()
    bed = FakeGpuTestbed(diamond(MeetB, MeetC), cpu_workers=2)
    ex = bed.run(wf, {"a": C, "b": N, "c": N, "d": C}, inputs={"q": "x"})
    assert ex.status is Status.OOM
    assert ex.message in (
        "gpu_now task c needs 500 MB with 600 MB held: 1100 > budget 1000 MB",
        "gpu_now task b needs 600 MB with 500 MB held: 1100 > budget 1000 MB",
    )
    Meet.barrier.reset()
    ex = bed.run(wf, {"a": C, "b": N, "c": C, "d": C}, inputs={"q": "x"})
    assert ex.ok and ex.peak_vram_mb == 600


class Boom(Recording):
    name = "boom"

    def run(self, inputs: dict[str, Any]) -> Any:
        if inputs.get("q") == "explode":
            raise RuntimeError("kaboom\nsecond line")
        return super().run(inputs)


def test_a_node_that_raises_ends_that_invocation_only(make_workflow) -> None:
    g = StateGraph(State)
    g.add_node("a", tool_node(Boom))
    g.add_node("b", tool_node(B))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way")
    bed = LangGraphTestbed(g)
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "explode"})
    assert ex.status is Status.ERROR
    assert ex.message == "node a (boom) failed: RuntimeError: kaboom"
    assert bed.last_state is None and "b" not in ex.outputs
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "fine"})
    assert ex.ok and bed.last_state["b"]["inputs"] == ["a"]


def test_host_nodes_are_timed_and_a_failing_host_node_is_named(make_workflow) -> None:
    def llm(state: State) -> dict:
        if state.get("q") == "bad":
            raise ValueError("no answer")
        if state.get("q") == "down":
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        return {"llm": "rewritten"}

    g = StateGraph(State)
    g.add_node("a", tool_node(A))
    g.add_node("llm", llm)
    g.add_node("b", tool_node(B))
    g.add_edge(START, "a")
    g.add_edge("a", "llm")
    g.add_edge("llm", "b")
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way")
    bed = LangGraphTestbed(g)
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "fine"})
    assert ex.ok
    assert bed.last_state["b"]["inputs"] == ["a", "llm"]
    (host,) = ex.extra["host_spans"]
    assert host["node"] == "llm"
    a, b = ex.span("a"), ex.span("b")
    assert a.end_ms <= host["start_ms"] <= host["end_ms"] <= b.start_ms
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "bad"})
    assert ex.status is Status.ERROR and ex.message == "node llm (host) failed: ValueError: no answer"
    assert ex.extra["failed_node"] == "llm" and not ex.placement_failed  # host code: not the mapping's
    assert ex.extra["external"] is False  # after a placed task: its host code may not take what a ran
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "down"})
    assert ex.extra["external"] is True  # an endpoint refused: no placement causes that


def test_a_host_node_that_failed_before_any_placed_task_started_cannot_be_the_mappings(make_workflow) -> None:
    def llm(state: State) -> dict:
        raise ValueError("bad prompt")

    g = StateGraph(State)
    g.add_node("llm", llm)
    g.add_node("a", tool_node(A))
    g.add_edge(START, "llm")
    g.add_edge("llm", "a")
    wf = make_workflow(CARDS, {"a": "a"}, [], space="three_way")
    ex = LangGraphTestbed(g).run(wf, {"a": C}, inputs={"q": "x"})
    assert ex.extra["failed_node"] == "llm" and ex.extra["external"] is True
    assert ex.span("a") is None  # the placed task never ran


def test_a_step_where_a_placed_node_and_a_host_node_both_fail_is_the_placed_nodes(make_workflow) -> None:
    def llm(state: State) -> dict:
        raise ValueError("no answer")

    class Raises(Recording):
        name = "b"

        def run(self, inputs: dict[str, Any]) -> Any:
            raise RuntimeError("kaboom")

    g = StateGraph(State)
    g.add_node("a", tool_node(A))
    g.add_node("b", tool_node(Raises))  # in the same step as llm: LangGraph raises either error
    g.add_node("llm", llm)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "llm")
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way")
    bed = LangGraphTestbed(g, cpu_workers=2)
    for _ in range(12):  # (the order LangGraph picks varies from run to run)
        ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "x"})
        assert ex.extra.get("failed_task") == "b" and ex.placement_failed, ex.message


def test_langgraphs_own_error_may_be_the_placements(make_workflow, wf) -> None:
    bed = LangGraphTestbed(diamond(), recursion_limit=1)
    ex = bed.run(wf, {t: C for t in "abcd"}, inputs={"q": "x"})
    assert ex.status is Status.ERROR and ex.message.startswith("graph failed: ")
    assert "failed_node" not in ex.extra and ex.placement_failed


def test_conditional_branch_not_taken_is_reported_skipped(make_workflow) -> None:
    def pick(state: State) -> Literal["b", "c"]:
        return "c" if state.get("q") == "c" else "b"

    g = StateGraph(State)
    g.add_node("a", tool_node(A))
    g.add_node("b", tool_node(B))
    g.add_node("c", tool_node(Cq))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", pick)
    wf = make_workflow(CARDS, {t: t for t in "abc"}, [("a", "b"), ("a", "c")], space="three_way")
    bed = LangGraphTestbed(g)
    ex = bed.run(wf, {t: C for t in "abc"}, inputs={"q": "c"})
    assert ex.ok and ex.extra["skipped"] == ["b"] and set(ex.outputs) == {"a", "c"}


def test_function_node_gets_the_state_and_its_device(make_workflow) -> None:
    @placeable(workload="w", load=lambda device: f"m@{device}")
    def f(state: State, device: str, model: Any) -> dict:
        return {"flag": (state["q"], device, model)}

    g = StateGraph(State)
    g.add_node(f)
    g.add_edge(START, "f")
    wf = make_workflow({"f": {"cpu_ms": 1, "gpu_ms": 1}}, {"f": "f"}, space="three_way")
    bed = FakeGpuTestbed(g)
    ex = bed.run(wf, {"f": N}, inputs={"q": "x"})
    assert ex.ok and bed.last_state["flag"] == ("x", "cuda:0", "m@cuda:0")


def test_gpu_placement_without_cuda_is_refused(wf) -> None:
    class NoCuda(LangGraphTestbed):
        def _cuda_available(self) -> bool:
            return False

    bed = NoCuda(diamond())
    with pytest.raises(TestbedError, match="^task b is mapped to gpu_now but this machine has no CUDA GPU"):
        bed.run(wf, {"a": C, "b": N, "c": C, "d": C}, inputs={"q": "x"})
    with pytest.raises(TestbedError, match="^task a is mapped to gpu_now"):
        bed.preflight(wf)


def test_send_fan_out_runs_one_task_several_times_on_its_placement(make_workflow) -> None:
    import operator
    from typing import Annotated

    from langgraph.types import Send

    class FanState(TypedDict, total=False):
        q: str
        parts: list
        b: Annotated[list, operator.add]

    class Part(Recording):
        name = "b"

        def run(self, inputs: dict[str, Any]) -> Any:
            super().run(inputs)
            return [inputs["part"] * 2]

    class PartIn(TypedDict):
        part: str

    def split(state: FanState) -> dict:
        return {"parts": state["q"].split()}

    def fan(state: FanState) -> list:
        return [Send("b", {"part": p}) for p in state["parts"]]

    g = StateGraph(FanState)
    g.add_node("split", split)
    g.add_node("b", tool_node(Part, reads=["part"]), input_schema=PartIn)  # what each Send carries
    g.add_edge(START, "split")
    g.add_conditional_edges("split", fan, ["b"])
    wf = make_workflow(CARDS, {"b": "b"}, space="three_way")
    EVENTS.clear()
    bed = FakeGpuTestbed(g)
    ex = bed.run(wf, {"b": Q}, inputs={"q": "x y z"})
    assert ex.ok, ex.message
    assert sorted(bed.last_state["b"]) == ["xx", "yy", "zz"]
    assert ex.extra["runs"] == {"b": 3} and len(ex.spans) == 1
    assert [e for t, e, _ in EVENTS if t == "Part"] == ["load", "run", "unload"] * 3  # one at a time


def test_a_node_langgraph_retries_then_succeeds_is_ok(make_workflow) -> None:
    from langgraph.types import RetryPolicy

    class Flaky(Recording):
        name = "a"
        calls = 0

        def run(self, inputs: dict[str, Any]) -> Any:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise ConnectionError("transient")
            return super().run(inputs)

    g = StateGraph(State)
    g.add_node("a", tool_node(Flaky), retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01))
    g.add_node("b", tool_node(B))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way")
    bed = LangGraphTestbed(g)
    ex = bed.run(wf, {"a": C, "b": C}, inputs={"q": "x"})
    assert ex.ok, ex.message
    assert Flaky.calls == 2 and ex.extra["runs"] == {"a": 1, "b": 1}


def test_compiled_graph_with_checkpointer_or_interrupts_refused() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentsched.integrations.langgraph import GraphError

    with pytest.raises(GraphError, match="^the graph was compiled with a checkpointer"):
        LangGraphTestbed(diamond().compile(checkpointer=InMemorySaver()))
    with pytest.raises(GraphError, match="^the graph was compiled to interrupt at node 'b'"):
        LangGraphTestbed(diamond().compile(interrupt_before=["b"]))
    assert LangGraphTestbed(diamond().compile()).spec.task_ids == ["a", "b", "c", "d"]
