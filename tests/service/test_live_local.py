"""``serve --testbed local --placement live``: every task of every invocation placed when it becomes
ready, over this process as one machine (``testbeds/live_machine.py``).

In process: user tools on a fake GPU (this machine has none) that slow a sensitive tool by what
runs beside it; the learned contention is kept in the store across a restart. As a real server
process: CPU tools (sleeps) answered over HTTP, recorded as live."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode
from agentsched.service import Engine, ServiceConfig
from agentsched.service.views import describe, history
from agentsched.testbeds.local import LocalBackend
from agentsched.testbeds.spec import TestbedSpec
from tests.service.conftest import ROOT

WORKFLOWS = ROOT / "tests" / "service" / "workflows"
JOIN_S = 120  # bounds a thread's join; not a timing check

TOOLS = """
import collections, threading, time
import agentsched

LOCK = threading.Lock()
RUNNING = collections.Counter()
PEAK = [0]  # the most GPU runs at once, as the tools saw it


class _Fake(agentsched.Tool):
    tags = ("compute-bound",)
    has_gpu = True
    input_names = ("x",)
    sensitivity = 0.0

    def load(self, device):
        self.device = device

    def run(self, inputs):
        if self.device == "cpu":
            time.sleep(0.12)
            return self.name
        with LOCK:
            RUNNING[self.name] += 1
            PEAK[0] = max(PEAK[0], sum(RUNNING.values()))
        try:
            work = 20.0  # ms alone; slowed 1 + sensitivity x (others running)
            while work > 0:
                with LOCK:
                    others = sum(RUNNING.values()) - 1
                time.sleep(0.002)
                work -= 2.0 / (1.0 + self.sensitivity * others)
        finally:
            with LOCK:
                RUNNING[self.name] -= 1
        return self.name

    def unload(self):
        pass


class Press(_Fake):
    name = "press"


class Touchy(_Fake):
    name = "touchy"
    sensitivity = 3.0
"""


def card(path: str) -> dict:
    return {
        "workload": path,
        "cpu_ms": 120.0,
        "gpu_ms": 20.0,
        "load_ms": 0.0,
        "vram_mb": 1000.0,
        "tags": ["compute-bound"],
    }


@pytest.fixture
def fake_gpu_workflow(tmp_path, monkeypatch):
    (tmp_path / "livetools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)
    (tmp_path / "cards.json").write_text(
        json.dumps(
            {
                "name": "fake",
                "source": "test",
                "cards": {"livetools:Press": card("press"), "livetools:Touchy": card("touchy")},
            }
        )
    )
    (tmp_path / "pair.yaml").write_text(
        "name: pair\ncards: cards.json\ndecision_space: three_way\nvram_budget_mb: 2000\n"
        'tasks:\n  A: {tool: "livetools:Press"}\n  B: {tool: "livetools:Touchy"}\nedges: []\n'
    )
    return tmp_path / "pair.yaml"


def config(workflow: Path, store: Path) -> ServiceConfig:
    return ServiceConfig(
        workflows=(str(workflow),), store=store, testbed=TestbedSpec(kind="local", cpu_slots=2), placement="live"
    )


def invoke_at_once(service: Engine, n: int) -> list:
    results: list = [None] * n
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, service.invoke("pair", {"x": 1}))) for i in range(n)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(JOIN_S)
    return results


def test_live_invocations_on_the_local_testbed_and_their_learning_kept_across_a_restart(
    fake_gpu_workflow, tmp_path, monkeypatch
):
    store = tmp_path / "live.db"
    service = Engine(config(fake_gpu_workflow, store))
    try:
        results = invoke_at_once(service, 12)
        assert all(r is not None and r.status is Status.OK and r.kind == "live" for r in results)
        assert all(r.round is None for r in results)  # outside the rounds, as the history rows say
        assert all(set(r.mapping) == {"A", "B"} and r.outputs for r in results)
        import livetools

        assert livetools.PEAK[0] <= 2  # 1000 MB each, 2000 MB: never three GPU runs at once, as the tools saw it
        assert (service.machines.live.in_flight, service.machines.live.placed) == (0, {})
        assert [h.kind for h in history(service, "pair", 100)] == ["live"] * 12
        assert describe(service, "pair").placement == "live" and describe(service, "pair").current_mapping is None
        assert describe(service, "pair").host_only is False  # the (fake) GPU takes GPU placements
        learned = service.machines.contention.runs_learned()
        assert learned > 0  # GPU runs that overlapped another, timed on this machine
    finally:
        service.close()  # saves what it learned
    again = Engine(config(fake_gpu_workflow, store))
    try:
        assert again.machines.contention.runs_learned() == learned  # resumed, not started from the priors
    finally:
        again.close()
    import agentsched.service.machines as service_module

    monkeypatch.setattr(service_module, "machine_id", lambda: "local:another GPU:64 cpus")
    elsewhere = Engine(config(fake_gpu_workflow, store))
    try:
        assert elsewhere.machines.contention.runs_learned() == 0  # another machine: from the priors
    finally:
        elsewhere.close()


def test_a_pinned_mapping_still_wins_over_live_placement(fake_gpu_workflow, tmp_path):
    service = Engine(config(fake_gpu_workflow, tmp_path / "pin.db"))
    try:
        service.runtime("pair").pin({"A": "cpu", "B": "cpu"})
        version = service.machines.live.version
        r = service.invoke("pair", {"x": 1})
        assert r.kind == "pinned" and r.status is Status.OK and set(r.mapping.values()) == {"cpu"}
        assert service.machines.live.version > version  # its tasks went on the machine's books (the planner sees them)
        assert r.round is None
    finally:
        service.close()


def test_a_real_server_places_each_task_live_on_the_local_testbed(start_server, tmp_path):
    server = start_server(
        ["sleepy.yaml", "--store", str(tmp_path / "s.db"), "--placement", "live", "--cpu-slots", "2"], cwd=WORKFLOWS
    )
    answers: list = []
    with server.client() as c:
        threads = [
            threading.Thread(
                target=lambda: answers.append(
                    server.client().post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0.05}})
                )
            )
            for _ in range(4)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(JOIN_S)
        assert [a.status_code for a in answers] == [200] * 4
        assert all(a.json()["kind"] == "live" and a.json()["mapping"] == {"wait": "cpu"} for a in answers)
        (wf,) = c.get("/v1/workflows").json()
        assert wf["placement"] == "live" and wf["invocations"] == 4
        assert wf["host_only"] is False  # (a CPU tool: nothing of it would run elsewhere)
        metrics = c.get("/metrics").text.splitlines()
        assert "agentsched_vram_reserved_mb 0.0" in metrics  # every invocation ended: nothing held
        assert "agentsched_contention_runs_learned 0.0" in metrics  # CPU tools: no GPU run to learn from
    assert server.stop() == 0


def test_a_live_invocation_missing_its_input_is_a_one_line_error(fake_gpu_workflow, tmp_path):
    from agentsched.errors import ToolError

    service = Engine(config(fake_gpu_workflow, tmp_path / "in.db"))
    try:
        with pytest.raises(ToolError, match="missing input"):
            service.invoke("pair", {})
        assert service.machines.live.in_flight == 0 and history(service, "pair", 10) == []
    finally:
        service.close()


def test_live_placement_on_ray_is_refused_in_one_line(tmp_path):
    from agentsched.errors import AgentschedError

    with pytest.raises(AgentschedError, match="^placement live needs the local testbed or the real-time simulator"):
        ServiceConfig(workflows=("S1",), store=tmp_path / "r.db", testbed=TestbedSpec(kind="ray"), placement="live")


def test_live_placement_of_a_gpu_tool_without_a_card_is_refused_in_one_line(fake_gpu_workflow, tmp_path):
    from agentsched.errors import AgentschedError

    bare = tmp_path / "bare.yaml"
    bare.write_text(
        fake_gpu_workflow.read_text().replace("cards: cards.json\n", "").replace("name: pair", "name: bare")
    )
    with pytest.raises(
        AgentschedError,
        match=r"^--placement live needs profiled cards for GPU tools, but task\(s\) "
        r"A, B of workflow bare have none",
    ):
        Engine(config(bare, tmp_path / "bare.db"))


def test_an_invocation_the_cut_answered_is_not_recorded_again_when_its_tools_end(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(WORKFLOWS))
    service = Engine(
        ServiceConfig(
            workflows=(str(WORKFLOWS / "sleepy.yaml"),),
            store=tmp_path / "cut.db",
            testbed=TestbedSpec(kind="local", cpu_slots=2),
            placement="live",
            drain_s=0,
        )
    )
    try:
        answer: list = []
        th = threading.Thread(target=lambda: answer.append(service.invoke("sleepy", {"seconds": 1.0})))
        th.start()
        for _ in range(2000):  # (bounded polling until its tool sleeps)
            if service.machines.live.cpu_busy == 1:
                break
            threading.Event().wait(0.005)
        assert service.machines.live.cpu_busy == 1
        assert service.cut() == 1  # recorded and answered as cut; its tool still sleeps
        th.join(JOIN_S)  # its tool ended after the cut: the cut's answer stands
        assert answer[0].kind == "cut" and [h.kind for h in history(service, "sleepy", 10)] == ["cut"]
        assert service.cut() == 0  # a second cut (the drain's and a signal's at once): nothing twice
    finally:
        service.close()


def test_a_cut_the_store_refuses_now_is_kept_for_the_next_store(tmp_path, monkeypatch, caplog):
    """Before, the cut's record was lost when the store refused it (logged)."""
    from agentsched.errors import StoreError
    from agentsched.store import Store

    monkeypatch.syspath_prepend(str(WORKFLOWS))
    db = tmp_path / "cut.db"
    service = Engine(
        ServiceConfig(
            workflows=(str(WORKFLOWS / "sleepy.yaml"),),
            store=db,
            testbed=TestbedSpec(kind="local", cpu_slots=2),
            placement="live",
            drain_s=0,
        )
    )
    try:
        th = threading.Thread(target=lambda: service.invoke("sleepy", {"seconds": 1.0}))
        th.start()
        for _ in range(2000):  # (bounded polling until its tool sleeps)
            if service.machines.live.cpu_busy == 1:
                break
            threading.Event().wait(0.005)

        def refused(*args, **kwargs):
            e = StoreError(f"store {db} is locked by another process (waited 30 s)")
            e.transient = True
            raise e

        monkeypatch.setattr(service.store, "append", refused)  # (another process holding it, at the cut)
        assert service.cut() == 1
        th.join(JOIN_S)
    finally:
        service.close()
    assert "could not record a cut invocation of sleepy now" in caplog.text and "kept in" in caplog.text
    st = Store(db)
    try:
        learner = st.learners("sleepy")[0]
        assert [e.kind for e in st.executions(learner.id)] == ["cut"]
    finally:
        st.close()


def test_an_invocation_is_claimed_for_recording_once():
    from agentsched.service.admission import Flight

    f = Flight("S1")
    assert f.claim("cut") and not f.claim("cut") and not f.claim("result")  # two cuts at once: one record
    g = Flight("S1")
    assert g.claim("result") and not g.claim("cut")  # its own result first: the cut leaves it be


def test_without_cuda_the_service_says_its_workflows_run_as_host_code(fake_gpu_workflow, tmp_path, monkeypatch):
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: False)
    service = Engine(config(fake_gpu_workflow, tmp_path / "host.db"))
    try:
        assert describe(service, "pair").host_only is True
        r = service.invoke("pair", {"x": 1})
        assert r.status is Status.OK and set(r.mapping.values()) == {Mode.CPU}  # nothing to place elsewhere
    finally:
        service.close()
