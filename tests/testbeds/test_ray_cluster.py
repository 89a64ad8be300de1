"""The ray testbed on a real multi-node Ray cluster started on this machine (``ray.cluster_utils``):
CPU-only nodes that declare one fake GPU and 1000 MB of ``vram_mb`` each, light fake tools (sleeps),
GPUs emulated. Skipped only when ray is not installed."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

import agentsched

ray = pytest.importorskip("ray")

from agentsched.model.execution import Status  # noqa: E402
from agentsched.model.workflow import Mode  # noqa: E402
from agentsched.model.workflow_io import parse_workflow  # noqa: E402
from agentsched.testbeds.local import LocalBackend, LocalTestbed  # noqa: E402
from agentsched.testbeds.ray import EMULATED_NOTE, RayTestbed  # noqa: E402
from tests.support.ray_cluster import ray_cluster  # noqa: E402
from tests.support.sleep_tool import SleepFactory  # noqa: E402

pytestmark = pytest.mark.ray

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE
NODE_VRAM_MB = 1000.0  # every node's vram_mb: clip (656 MB) + bert_base (486 MB) do not fit on one
NODE = {"num_cpus": 1, "num_gpus": 1, "resources": {"vram_mb": NODE_VRAM_MB}}


def wf(tasks: dict, edges=(), budget=None):
    return parse_workflow(
        {
            "name": "t",
            "cards": "a5500",
            "decision_space": "three_way",
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        },
        "t",
    )


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster({**NODE, "_system_config": {"idle_worker_killing_time_threshold_ms": 3_600_000}}, NODE) as c:
        yield c


def make_tb(cluster, call_s=0.05, **kw) -> RayTestbed:
    return RayTestbed(address=cluster.address, emulate_gpu=True, tool_factory=SleepFactory(call_s), **kw)


def test_tasks_spread_over_the_nodes_and_data_flows(cluster):
    # two 1-CPU nodes: the two middle tasks run at once only on different nodes
    tb = make_tb(cluster, call_s=0.3)
    try:
        w = wf(
            {"A": "groupby", "B": "doc_merger", "C": "image_resize", "D": "vector_search"},
            [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
        )
        ex = tb.run(w, {"A": C, "B": C, "C": C, "D": C}, inputs={"q": 1})
        assert ex.ok, ex.message
        assert ex.extra["nodes"]["B"] != ex.extra["nodes"]["C"]
        assert len(set(ex.extra["nodes"].values())) == 2
        s = {sp.task: sp for sp in ex.spans}
        assert s["B"].start_ms < s["C"].end_ms and s["C"].start_ms < s["B"].end_ms  # they overlapped
        assert s["D"].start_ms >= max(s["B"].end_ms, s["C"].end_ms)
        assert ex.outputs["A"] == ("groupby", ["q"])  # a source task gets the invocation's inputs
        assert ex.outputs["D"] == ("vector_search", ["B", "C"])  # a join gets its predecessors' outputs
        assert ex.extra["emulated_gpu"] is True and ex.extra["timing_note"] == EMULATED_NOTE
    finally:
        tb.close()


def test_gpu_now_tasks_over_a_nodes_vram_are_never_colocated(cluster):
    # no workflow budget: the start rules admit both at once; only Ray's vram_mb keeps them apart
    tb = make_tb(cluster, call_s=0.3)
    try:
        w = wf({"A": "clip", "B": "bert_base", "C": "clip"})
        for _ in range(3):
            ex = tb.run(w, {"A": N, "B": N, "C": N})
            assert ex.ok, ex.message
            s = {sp.task: sp for sp in ex.spans}
            nodes = ex.extra["nodes"]
            for x, y in itertools.combinations("ABC", 2):
                if nodes[x] == nodes[y]:  # same node: one after the other
                    assert s[x].end_ms <= s[y].start_ms + 1 or s[y].end_ms <= s[x].start_ms + 1, (x, y, ex.spans)
            assert ex.peak_vram_mb == pytest.approx(656 + 486 + 656)  # all three admitted together
    finally:
        tb.close()


def test_a_task_no_node_can_hold_is_an_error_not_a_hang(cluster):
    tb = make_tb(cluster)
    try:
        ex = tb.run(wf({"A": "llama_1b"}), {"A": N})  # 2,400+ MB > every node's 1000 MB
        assert ex.status is Status.ERROR and "no Ray node offers" in ex.message
    finally:
        tb.close()


def test_concurrent_invocations_each_get_an_execution(cluster):
    tb = make_tb(cluster, call_s=0.1)
    try:
        w = wf({"A": "groupby", "B": "clip"}, [("A", "B")])
        res = tb.run_concurrent(w, {"A": C, "B": Q}, 3)
        assert len(res.executions) == 3 and all(e.ok for e in res.executions)
        assert res.throughput_per_s > 0
    finally:
        tb.close()


def test_ray_and_local_agree_on_feasibility(cluster, monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)  # fake GPU tools locally
    w = wf({"A": "clip", "B": "bert_base"}, budget=1100)  # both on gpu_now: 1142 MB > 1100: oom
    tb = make_tb(cluster, call_s=0.02)
    local = LocalTestbed(size="small", tool_factory=SleepFactory(0.02))
    try:
        seen = set()
        for a, b in itertools.product((C, N, Q), repeat=2):
            m = {"A": a, "B": b}
            rs, ls = tb.run(w, m).status, local.run(w, m).status
            assert rs is ls, (m, rs, ls)
            seen.add(rs)
        assert seen == {Status.OK, Status.OOM}
    finally:
        tb.close()
        local.close()


def test_a_node_removed_mid_run_is_retried_or_an_error_never_a_hang(cluster):
    extra = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    tb = make_tb(cluster, call_s=2.0, timeout_s=60)
    w = wf({"A": "groupby", "B": "doc_merger", "C": "image_resize", "D": "vector_search"})
    out: list = []
    th = threading.Thread(target=lambda: out.append(tb.run(w, {t: C for t in "ABCD"})))
    try:
        assert tb.run(w, {t: C for t in "ABCD"}).ok  # warm: actors and workers on all three nodes
        th.start()
        time.sleep(1.0)  # three 1-CPU nodes: three 2-s tasks are running, one on the new node
        cluster.remove_node(extra)
        th.join(timeout=120)
        assert not th.is_alive(), "the run hung after a node was removed"
        ex = out[0]
        assert ex.status in (Status.OK, Status.ERROR)
        if ex.ok:  # Ray re-ran the lost lease on a surviving node
            assert set(ex.extra["nodes"].values()) <= {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]}
    finally:
        th.join(timeout=120)
        tb.close()


class Words(agentsched.Tool):
    """A user tool (the public API): splits its ``text`` argument."""

    name = "words"
    has_gpu = False
    input_names = ("text",)

    def run(self, inputs):
        return inputs["text"].split()


class Count(agentsched.Tool):
    """A user tool with a GPU version (emulated here): counts its predecessor's words."""

    name = "count"
    has_gpu = True

    def run(self, inputs):
        return len(inputs["A"])


def test_runtime_invokes_user_tools_on_the_cluster(cluster):
    from agentsched.runtime import Runtime, workflow_from_tools

    w = workflow_from_tools("words", {"A": Words, "B": Count}, [("A", "B")], vram_budget_mb=500)
    tb = make_tb(cluster)
    with Runtime(w, policy="agent-rules-cold", store=None, testbed=tb, round_size=2) as rt:
        results = [rt.invoke(text="one two three") for _ in range(4)]
    tb.close()
    assert [r.status for r in results] == ["ok"] * 4, [r.message for r in results]
    assert all(r.outputs == {"B": 3} for r in results)
    assert all(sorted(sp["task"] for sp in r.timeline) == ["A", "B"] for r in results)


class SlowLoad(agentsched.Tool):
    """A user tool whose load takes longer than the task timeout of the test; its run is instant."""

    name = "slow_load"
    has_gpu = True
    input_names = ("text",)
    load_s = 1.5

    def load(self, device):
        time.sleep(self.load_s)
        self.device = device

    def run(self, inputs):
        return inputs["text"].upper()


def test_a_task_timeout_shorter_than_a_tools_load_still_runs_it(cluster):
    """Before, the load before the clock was bounded by the task timeout: every invocation failed with
    Ray's "GetTimeoutError: Get timed out: some object(s) not ready." though the run takes no time."""
    from agentsched.runtime import Runtime, workflow_from_tools

    w = workflow_from_tools("slow-load", {"A": SlowLoad}, [])
    tb = make_tb(cluster, timeout_s=SlowLoad.load_s / 3)
    try:
        with Runtime(w, policy="agent-rules-cold", store=None, testbed=tb, round_size=1) as rt:
            results = [rt.invoke(text="hi") for _ in range(2)]
    finally:
        tb.close()
    assert [r.status for r in results] == ["ok"] * 2, [r.message for r in results]
    assert all(r.outputs == {"A": "HI"} for r in results)


def test_a_task_no_node_can_ever_hold_runs_on_the_cpu_from_the_first_invocation(cluster, caplog):
    """Before, the learner kept proposing GPU placements of it, and each such invocation failed."""
    from agentsched.model.mapping import mapping_key
    from agentsched.runtime import Runtime

    w = wf({"A": "groupby", "B": "llama_1b"}, [("A", "B")])  # llama_1b: 2,400+ MB > every node's 1,000 MB
    tb = make_tb(cluster, call_s=0.01)
    caplog.set_level("WARNING", logger="agentsched")
    try:
        with Runtime(w, policy="ucb1", store=None, testbed=tb, round_size=1, seed=3) as rt:
            results = [rt.invoke() for _ in range(8)]  # ucb1 tries every mapping once
            keys = {mapping_key(rt.workflow, r.mapping) for r in results}
    finally:
        tb.close()
    assert [r.status for r in results] == ["ok"] * 8, [r.message for r in results]
    assert all(not sp["vram_mb"] for r in results for sp in r.timeline if sp["task"] == "B")  # on the host
    assert len(keys) > 1  # it explored: B's GPU placements are the same CPU run
    assert any("task B (llama_1b) needs" in r.message and "it runs on the CPU" in r.message for r in caplog.records)


def test_actors_the_cluster_cannot_create_fail_the_run_in_one_line(cluster, monkeypatch):
    """Before, an error creating the tool actors (Ray's RaySystemError: Actor creation cancelled,
    seen joining a cluster with --ray-address auto) escaped as an internal error."""
    tb = make_tb(cluster)

    def cancelled(nodes):
        raise ray.exceptions.RaySystemError("System error: Actor creation cancelled.")

    monkeypatch.setattr(tb.cluster, "hosts", cancelled)
    try:
        ex = tb.run(wf({"A": "groupby"}), {"A": C})
    finally:
        tb.close()
    assert ex.status is Status.ERROR
    assert ex.message.startswith("loading the tools on the Ray cluster failed: RaySystemError: ")
    assert ex.extra["external"] and not ex.placement_failed  # the cluster's failure: no placement's
