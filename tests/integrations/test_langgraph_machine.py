"""Concurrent invocations of one LangGraph graph share its tools, CPU slots, GPU queue and VRAM
(integrations/langgraph/machine.py): the real langgraph, runs in threads as the runtime's callers
make them. GPU placements use tools that only record their device (no CUDA here)."""

import gc
import threading
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from agentsched.errors import TestbedError  # noqa: E402
from agentsched.integrations.langgraph import LangGraphTestbed, tool_node  # noqa: E402
from agentsched.integrations.langgraph.machine import GraphMachine, _Host  # noqa: E402
from agentsched.integrations.langgraph.testbed import RESULT_KEY, RunResult  # noqa: E402
from agentsched.model.execution import Status  # noqa: E402
from agentsched.model.tool import Tool  # noqa: E402
from agentsched.model.workflow import Mode  # noqa: E402
from tests.integrations.test_langgraph_testbed import FakeGpuTestbed  # noqa: E402

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE
WAIT_S = 0.15  # how long a tool stays inside run: long enough for another run to come in if it may


class State(TypedDict, total=False):
    q: Any
    a: Any
    b: Any


class Inside:
    """Counts runs inside ``run`` at once (and the VRAM of the GPU ones), per test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.vram_now_mb = self.vram_most_mb = 0.0
        self.events: list[tuple[str, str, str]] = []

    def enter(self, vram_mb: float) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.vram_now_mb += vram_mb
            self.vram_most_mb = max(self.vram_most_mb, self.vram_now_mb)

    def leave(self, vram_mb: float) -> None:
        with self.lock:
            self.now -= 1
            self.vram_now_mb -= vram_mb


INSIDE = Inside()
VRAM_MB = {"a": 600.0, "b": 500.0}


class Slow(Tool):
    """Stays in run WAIT_S; echoes the invocation's ``q`` (or its predecessor's) and its device."""

    name = "slow"

    def __init__(self) -> None:
        self.device: str | None = None

    def load(self, device: str) -> None:
        INSIDE.events.append((self.name, "load", device))
        self.device = device

    def unload(self) -> None:
        INSIDE.events.append((self.name, "unload" if INSIDE.now == 0 else "unload under a run", self.device or ""))
        self.device = None

    def run(self, inputs: dict[str, Any]) -> Any:
        mb = VRAM_MB[self.name] if (self.device or "").startswith("cuda") else 0.0
        INSIDE.enter(mb)
        INSIDE.events.append((self.name, "run", self.device or ""))
        threading.Event().wait(WAIT_S)
        INSIDE.leave(mb)
        seen = inputs.get("q", inputs.get("a"))
        return {"q": seen["q"] if isinstance(seen, dict) else seen, "device": self.device}


class SlowA(Slow):
    name = "a"


class SlowB(Slow):
    name = "b"


class SafeA(SlowA):
    concurrent_safe = True


def chain(a: type = SlowA, b: type = SlowB) -> StateGraph:
    g = StateGraph(State)
    g.add_node("a", tool_node(a))
    g.add_node("b", tool_node(b))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


def one_node(a: type) -> StateGraph:
    g = StateGraph(State)
    g.add_node("a", tool_node(a))
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g


CARDS = {
    "a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": VRAM_MB["a"]},
    "b": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": VRAM_MB["b"]},
}


@pytest.fixture(autouse=True)
def fresh() -> None:
    global INSIDE
    INSIDE = Inside()


def at_once(bed: LangGraphTestbed, wf: Any, mappings: list[dict[str, Mode]]) -> list[tuple[Any, RunResult]]:
    """Run one invocation per mapping, each in its own thread, all started together, after one run
    alone (a compiled graph's first invocations are slow to reach their first node: LangGraph's own
    set-up, which would stagger the runs it measures); the counts start after it."""
    assert bed.run(wf, mappings[0], inputs={"q": "warm-up"}).ok
    global INSIDE
    INSIDE = Inside()
    out: list[Any] = [None] * len(mappings)
    go = threading.Barrier(len(mappings))

    def one(i: int) -> None:
        r = RunResult()
        go.wait()
        out[i] = (bed.run(wf, mappings[i], inputs={"q": f"q{i}", RESULT_KEY: r}), r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(mappings))]
    gc.disable()  # a collection pause (LangGraph leaves many cycles) would stagger the runs measured here
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        gc.enable()
    return out


@pytest.fixture
def chain_wf(make_workflow):
    return make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way")


@pytest.fixture
def one_wf(make_workflow):
    return make_workflow({"a": CARDS["a"]}, {"a": "a"}, [], space="three_way")


def test_each_run_gets_its_own_state_back(chain_wf) -> None:
    bed = LangGraphTestbed(chain(SafeA, SlowB), cpu_workers=4)
    runs = at_once(bed, chain_wf, [{"a": C, "b": C}] * 4)
    for i, (x, r) in enumerate(runs):
        assert x.status is Status.OK, x.message
        assert r.execution is x and r.state["b"] == {"q": f"q{i}", "device": "cpu"}
        assert RESULT_KEY not in r.state  # never given to the graph


def test_a_tool_serves_one_run_at_a_time_unless_it_says_concurrent_safe(one_wf) -> None:
    bed = LangGraphTestbed(one_node(SlowA), cpu_workers=4)
    assert all(x.ok for x, _ in at_once(bed, one_wf, [{"a": C}] * 3))
    assert INSIDE.most == 1  # one instance, one user: the invocations queue at the node
    bed = LangGraphTestbed(one_node(SafeA), cpu_workers=4)
    assert all(x.ok for x, _ in at_once(bed, one_wf, [{"a": C}] * 3))
    assert INSIDE.most == 3  # the same instance serves them at once


def test_invocations_pipeline_through_a_chain(chain_wf) -> None:
    bed = LangGraphTestbed(chain(), cpu_workers=4)
    runs = at_once(bed, chain_wf, [{"a": C, "b": C}] * 2)
    assert all(x.ok for x, _ in runs)
    assert INSIDE.most == 2  # one invocation at b while the other is at a


def test_cpu_slots_are_shared_by_every_invocation(one_wf) -> None:
    bed = LangGraphTestbed(one_node(SafeA), cpu_workers=2)
    assert all(x.ok for x, _ in at_once(bed, one_wf, [{"a": C}] * 4))
    assert INSIDE.most == 2


def test_the_gpu_queue_is_one_for_every_invocation(chain_wf) -> None:
    bed = FakeGpuTestbed(chain(), cpu_workers=4)
    runs = at_once(bed, chain_wf, [{"a": Q, "b": Q}] * 3)
    assert all(x.ok for x, _ in runs)
    assert INSIDE.most == 1  # a and b of different invocations never run together


def test_staged_gpu_runs_wait_for_vram_other_invocations_hold(make_workflow) -> None:
    # 600 + 500 MB do not fit in 1,000: one invocation alone never holds both (a chain), two could
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way", budget=1000)
    bed = FakeGpuTestbed(chain(), cpu_workers=4)
    runs = at_once(bed, wf, [{"a": N, "b": N}] * 3)
    assert all(x.ok for x, _ in runs), [x.message for x, _ in runs]
    assert INSIDE.vram_most_mb <= 1000 and INSIDE.most == 1
    bed = FakeGpuTestbed(chain(), cpu_workers=4)
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way", budget=1100)
    assert all(x.ok for x, _ in at_once(bed, wf, [{"a": N, "b": N}] * 2))
    assert INSIDE.most == 2  # both fit: the check can fail


def test_a_cpu_run_never_overlaps_a_staged_run_that_moves_the_same_tool(make_workflow) -> None:
    # under a budget a cpu run and a staged gpu_now run both keep the tool on the host between runs,
    # but the second moves it to the GPU while it runs: a concurrent_safe tool must not serve both
    wf = make_workflow({"a": CARDS["a"]}, {"a": "a"}, [], space="three_way", budget=1000)
    bed = FakeGpuTestbed(one_node(SafeA), cpu_workers=4)
    runs = at_once(bed, wf, [{"a": N}, {"a": C}, {"a": N}, {"a": C}])
    assert all(x.ok for x, _ in runs), [x.message for x, _ in runs]
    for (_, r), mode in zip(runs, [N, C, N, C], strict=False):
        assert r.state["a"]["device"] == ("cuda:0" if mode is N else "cpu")  # it ran where it was placed
    assert INSIDE.most <= 2 and all(d in ("cpu", "cuda:0") for _, e, d in INSIDE.events if e == "run")


def test_a_staged_tool_serves_one_run_at_a_time_even_with_no_vram_on_its_card(make_workflow) -> None:
    wf = make_workflow({"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 0}}, {"a": "a"}, [], space="three_way", budget=1000)
    bed = FakeGpuTestbed(one_node(SafeA), cpu_workers=4)
    runs = at_once(bed, wf, [{"a": N}] * 3)
    assert all(x.ok and r.state["a"]["device"] == "cuda:0" for x, r in runs)
    assert INSIDE.most == 1  # each run moves it to the GPU and back: one at a time


def test_a_queued_node_waits_for_vram_another_invocation_holds(make_workflow) -> None:
    # a (600 MB) staged on the GPU in one invocation, b (500 MB) queued in the other: 1,100 > 1,000
    wf = make_workflow(CARDS, {"a": "a", "b": "b"}, [("a", "b")], space="three_way", budget=1000)
    bed = FakeGpuTestbed(chain(), cpu_workers=4)
    runs = at_once(bed, wf, [{"a": N, "b": Q}] * 3)
    assert all(x.ok for x, _ in runs), [x.message for x, _ in runs]
    assert INSIDE.vram_most_mb <= 1000


def test_each_run_is_held_to_its_own_workflows_budget(make_workflow) -> None:
    big = make_workflow({"a": CARDS["a"]}, {"a": "a"}, [], space="three_way", budget=1000)
    small = make_workflow({"a": CARDS["a"]}, {"a": "a"}, [], space="three_way", budget=700)
    bed = FakeGpuTestbed(one_node(SlowA), cpu_workers=4)
    out: list[object] = []
    threads = [
        threading.Thread(target=lambda w=w, m=m: out.append(bed.run(w, m, inputs={"q": "x"})))
        for w, m in ((big, {"a": Q}), (big, {"a": Q}), (small, {"a": C}))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)  # another workflow's budget never strands a queued node
    assert len(out) == 3 and all(x.ok for x in out)


def test_a_run_under_another_placement_waits_for_the_runs_in_progress(one_wf) -> None:
    bed = FakeGpuTestbed(one_node(SafeA), cpu_workers=4)
    runs = at_once(bed, one_wf, [{"a": C}, {"a": C}, {"a": N}])
    assert all(x.ok for x, _ in runs)
    devices = [d for _, e, d in INSIDE.events if e == "run"]
    # the cpu runs overlap each other, never the GPU one: the tool moves only between them
    assert sorted(devices) == ["cpu", "cpu", "cuda:0"] and INSIDE.most <= 2
    assert devices in (["cpu", "cpu", "cuda:0"], ["cuda:0", "cpu", "cpu"])


def test_a_failed_invocation_does_not_stop_the_others(one_wf) -> None:
    class Picky(SafeA):
        def run(self, inputs: dict[str, Any]) -> Any:
            if inputs["q"] == "q1":
                raise ValueError("q1 is bad")
            return super().run(inputs)

    bed = LangGraphTestbed(one_node(Picky), cpu_workers=4)
    runs = at_once(bed, one_wf, [{"a": C}] * 3)
    assert [x.status for x, _ in runs] == [Status.OK, Status.ERROR, Status.OK]
    assert "q1 is bad" in runs[1][0].message and runs[1][1].state is None


def test_machine_fifo_cpu_slots_serve_in_order() -> None:
    machine = GraphMachine(cpu_slots=1)
    order: list[int] = []
    first = threading.Event()

    def take(i: int) -> None:
        with machine.node(f"t{i}", C, 0.0, staged=False, shared=True):
            order.append(i)
            if i == 0:
                first.wait(5)

    t0 = threading.Thread(target=take, args=(0,))
    t0.start()
    while not order:
        threading.Event().wait(0.005)
    waiting = []
    for i in (1, 2, 3):  # they queue in this order behind the slot 0 holds
        t = threading.Thread(target=take, args=(i,))
        t.start()
        waiting.append(t)
        while len(machine._cpu_line) < i:  # in the line before the next one comes
            threading.Event().wait(0.002)
    assert order == [0]  # one slot: the others wait
    first.set()
    for t in [t0, *waiting]:
        t.join(5)
    assert order == [0, 1, 2, 3]


def test_machine_two_graphs_share_the_hosts_cpu_slots() -> None:
    """Two graphs of one process, 2 CPU slots each, on a host of 2: before, each counted only its own
    slots, and 4 CPU nodes ran at once on 2 cores."""
    host = _Host(cpu_count=2)
    one = GraphMachine(cpu_slots=2, device="cuda:test-host", host=host)
    two = GraphMachine(cpu_slots=2, device="cuda:test-host-other", host=host)  # another device, the same host
    release = threading.Event()
    inside: list[str] = []

    def take(machine: GraphMachine, task: str) -> None:
        with machine.node(task, C, 0.0, staged=False, shared=True):
            inside.append(task)
            release.wait(5)

    threads = [threading.Thread(target=take, args=(m, t)) for m, t in ((one, "a"), (two, "b"), (one, "c"))]
    for t in threads:
        t.start()
        while len(inside) + len(host.line) < threads.index(t) + 1:  # inside, or in the host's line
            threading.Event().wait(0.002)
    assert sorted(inside) == ["a", "b"] and host.busy == 2 and len(host.line) == 1  # "c" waits for the host
    assert one._cpu_busy == 2  # it holds its graph's slot meanwhile
    release.set()
    for t in threads:
        t.join(5)
    assert sorted(inside) == ["a", "b", "c"] and host.busy == 0 and one._cpu_busy == two._cpu_busy == 0


def test_machine_a_graph_asking_more_slots_than_the_cpu_count_gets_them() -> None:
    host = _Host(cpu_count=2)
    GraphMachine(cpu_slots=1, host=host)
    assert host.slots == 2  # never fewer than the CPU count
    GraphMachine(cpu_slots=6, host=host)  # CPU tools waiting on I/O (an LLM over HTTP)
    assert host.slots == 6
    assert GraphMachine(cpu_slots=1)._host is GraphMachine(cpu_slots=1)._host  # one host per process


def _hold_then_try(
    one: GraphMachine, first: Mode, two: GraphMachine, task: str, second: Mode, join_s: float
) -> tuple[bool, float, list[str]]:
    """A node of ``one`` holds 600 MB (staged, budget 1,000 MB) while a 500 MB node ``task`` of ``two``
    tries to start in ``second``: (was it still waiting after ``join_s``, the VRAM ``one`` saw held
    meanwhile, the order of entries and exits)."""
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def hold() -> None:
        with one.node("a", first, 600.0, staged=True, shared=False, budget_mb=1000.0):
            order.append("a in")
            entered.set()
            release.wait(5)
        order.append("a out")

    def second_node() -> None:
        with two.node(task, second, 500.0, staged=True, shared=False, budget_mb=1000.0):
            order.append("b in")

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(5)
    other = threading.Thread(target=second_node)
    other.start()
    other.join(join_s)
    waiting, held_mb = other.is_alive(), one.vram_held_mb
    release.set()
    for t in (holder, other):
        t.join(5)
    return waiting, held_mb, order


@pytest.mark.parametrize("second", [Q, N])
def test_machine_a_gpu_node_waits_while_another_invocations_staged_vram_would_not_fit(second) -> None:
    machine = GraphMachine(cpu_slots=1)
    waiting, held_mb, order = _hold_then_try(machine, N, machine, "b", second, 0.2)
    assert waiting and held_mb == 600.0  # 600 + 500 > 1,000: it waits
    assert order == ["a in", "a out", "b in"] and machine.vram_held_mb == 0.0


def test_close_lets_the_runs_in_progress_end_before_it_unloads_and_starts_no_more(one_wf) -> None:
    bed = LangGraphTestbed(one_node(SafeA), cpu_workers=4)
    assert bed.run(one_wf, {"a": C}, inputs={"q": "warm-up"}).ok
    out: list[Any] = []
    threads = [
        threading.Thread(target=lambda: out.append(bed.run(one_wf, {"a": C}, inputs={"q": "x"}))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    while INSIDE.now == 0:  # a run is inside its tool
        threading.Event().wait(0.002)
    bed.close()
    for t in threads:
        t.join(30)
    kinds = [e for _, e, _ in INSIDE.events]
    assert "unload" in kinds and "unload under a run" not in kinds
    assert INSIDE.now == 0 and len(out) == 3 and any(x.ok for x in out)  # the run inside ended well
    with pytest.raises(TestbedError, match="closed"):
        bed.run(one_wf, {"a": C}, inputs={"q": "late"})


def test_close_leaves_every_tool_loaded_while_a_run_goes_on_past_its_wait(one_wf, monkeypatch) -> None:
    from agentsched.integrations.langgraph import testbed as testbed_module

    in_host, leave = threading.Event(), threading.Event()

    def llm(state: State) -> dict[str, Any]:  # a host node still working when the close gives up
        in_host.set()
        leave.wait(5)
        return {"b": "answered"}

    g = StateGraph(State)
    g.add_node("a", tool_node(SafeA))
    g.add_node("llm", llm)
    g.add_edge(START, "a")
    g.add_edge("a", "llm")
    g.add_edge("llm", END)
    bed = LangGraphTestbed(g, cpu_workers=2)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(bed.run(one_wf, {"a": C}, inputs={"q": "x"})))
    t.start()
    in_host.wait(5)
    monkeypatch.setattr(testbed_module, "CLOSE_WAIT_S", 0.05)
    bed.close()
    assert not [e for _, e, _ in INSIDE.events if e.startswith("unload")]  # the run may still call a node
    leave.set()
    t.join(30)
    assert out and out[0].ok


def test_a_testbed_passed_in_outlives_the_runtime_that_used_it(one_wf, tmp_path) -> None:
    from agentsched.integrations.langgraph import GraphRuntime

    bed = LangGraphTestbed(one_node(SafeA), cpu_workers=2)
    for i in range(2):  # the second runtime on the same testbed: its caller closes it, not the first
        with GraphRuntime(one_node(SafeA), "passed-in", store=str(tmp_path / "p.db"), testbed=bed) as grt:
            r = grt.invoke(q=f"q{i}")
            assert r.ok, r.message
    bed.close()


class Stuck(Tool):
    """Runs until ``release`` is set (a hung model call); says when it returned."""

    name = "a"
    release = threading.Event()
    returned = threading.Event()

    def run(self, inputs: dict[str, Any]) -> Any:
        INSIDE.enter(0.0)
        type(self).release.wait(10)
        INSIDE.leave(0.0)
        type(self).returned.set()
        return "late"


def test_a_node_past_its_timeout_fails_its_invocation_at_once_and_keeps_its_tool_until_it_returns(one_wf) -> None:
    Stuck.release.clear()
    Stuck.returned.clear()
    bed = LangGraphTestbed(one_node(Stuck), cpu_workers=2, node_timeout_s=0.2)
    x = bed.run(one_wf, {"a": C}, inputs={"q": "x"})
    assert x.status is Status.ERROR and not Stuck.returned.is_set()  # answered before the call returned
    assert x.message == "node a (a) failed: TimeoutError: ran longer than its timeout of 0.2 s (--task-timeout-s)"
    assert x.placement_failed and x.extra["failed_task"] == "a"
    second: list[Any] = []
    t = threading.Thread(target=lambda: second.append(bed.run(one_wf, {"a": C}, inputs={"q": "y"})))
    t.start()
    t.join(0.3)
    assert t.is_alive() and INSIDE.most == 1  # the abandoned call still holds the tool: the next waits
    Stuck.release.set()
    t.join(30)
    assert second and second[0].ok  # its own clock began when it got the tool


def test_a_node_timeout_does_not_count_the_wait_for_a_cpu_slot(one_wf) -> None:
    bed = LangGraphTestbed(one_node(SafeA), cpu_workers=1, node_timeout_s=WAIT_S * 1.6)
    runs = at_once(bed, one_wf, [{"a": C}] * 2)  # the second waits a whole run for the one slot
    assert [x.status for x, _ in runs] == [Status.OK, Status.OK]


def test_a_node_timeout_must_be_positive() -> None:
    with pytest.raises(TestbedError, match="node_timeout_s must be a number > 0, got 0"):
        LangGraphTestbed(one_node(SafeA), node_timeout_s=0)


def test_graph_runtime_takes_the_node_timeout_from_its_testbed_spec() -> None:
    from agentsched.integrations.langgraph import GraphRuntime
    from agentsched.testbeds.spec import TestbedSpec

    with GraphRuntime(one_node(SafeA), "timed", store=None, testbed=TestbedSpec(kind="local", timeout_s=0.2)) as grt:
        assert grt.testbed.node_timeout_s == 0.2


@pytest.mark.parametrize("second", [Q, N])
@pytest.mark.parametrize("same_device", [True, False])
def test_machine_two_graphs_on_one_device_share_its_vram_and_queue(second, same_device) -> None:
    """Two graphs served by one process (a machine each) on one GPU: before, each had a VRAM ledger of
    its own, so their staged nodes together could hold twice the budget (an OOM on the real GPU)."""
    one = GraphMachine(cpu_slots=1, device="cuda:test-shared")
    two = GraphMachine(cpu_slots=1, device="cuda:test-shared" if same_device else "cuda:test-other")
    # the same task name in another graph is another tool
    waiting, _, order = _hold_then_try(one, Q, two, "a", second, 0.2 if same_device else 5)
    assert waiting is same_device  # on one device: 600 + 500 > 1,000 (and one queue)
    assert sorted(order) == ["a in", "a out", "b in"]
    assert (order == ["a in", "a out", "b in"]) or not same_device
    assert one.vram_held_mb == 0.0 and two.vram_held_mb == 0.0


def test_two_graphs_served_by_one_process_never_hold_more_than_the_budget_together(make_workflow) -> None:
    # a (600 MB) in one graph, b (500 MB) in another, both staged under 1,000 MB on cuda:0
    wf_a = make_workflow({"a": CARDS["a"]}, {"a": "a"}, [], space="three_way", budget=1000)
    wf_b = make_workflow({"b": CARDS["b"]}, {"b": "b"}, [], space="three_way", budget=1000)
    g = StateGraph(State)
    g.add_node("b", tool_node(SlowB))
    g.add_edge(START, "b")
    g.add_edge("b", END)
    beds = [
        (FakeGpuTestbed(one_node(SlowA), cpu_workers=4), wf_a, {"a": N}),
        (FakeGpuTestbed(g, cpu_workers=4), wf_b, {"b": N}),
    ]
    for bed, wf, mapping in beds:  # warm-up (LangGraph's own set-up would stagger the runs)
        assert bed.run(wf, mapping, inputs={"q": "warm-up"}).ok
    global INSIDE
    INSIDE = Inside()
    out: list[Any] = []
    go = threading.Barrier(4)

    def one(bed: Any, wf: Any, mapping: dict[str, Mode]) -> None:
        go.wait()
        out.append(bed.run(wf, mapping, inputs={"q": "x"}))

    threads = [threading.Thread(target=one, args=b) for b in beds * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(out) == 4 and all(x.ok for x in out), [x.message for x in out]
    assert INSIDE.vram_most_mb <= 1000  # before: 1,100 (each graph counted only its own)


def test_machine_a_graph_moving_its_tools_does_not_stop_another_graph_on_the_device() -> None:
    """Loading models takes seconds: before, it ran under the device's lock and every other graph's
    nodes waited for it."""
    one = GraphMachine(cpu_slots=1, device="cuda:test-placing")
    two = GraphMachine(cpu_slots=1, device="cuda:test-placing")
    loading, loaded = threading.Event(), threading.Event()

    def place() -> None:
        loading.set()
        loaded.wait(5)

    def run_one() -> None:
        with one.placement("gpu", place):
            pass

    mover = threading.Thread(target=run_one)
    mover.start()
    assert loading.wait(5)
    ran = threading.Event()

    def run_two() -> None:
        with two.placement("cpu", lambda: None), two.node("a", C, 0.0, staged=False, shared=True):
            ran.set()

    other = threading.Thread(target=run_two)
    other.start()
    try:
        assert ran.wait(5)  # the other graph's run went on while this one was loading
        same = threading.Thread(target=run_one)  # a second run of the moving graph waits for the move
        same.start()
        same.join(0.2)
        assert same.is_alive()
    finally:
        loaded.set()
    for t in (mover, other, same):
        t.join(5)
    assert not any(t.is_alive() for t in (mover, other, same))
