"""``serve --placement live``: the load-aware planner places each task on the shared simulated machine."""

from __future__ import annotations

import threading

import pytest

from agentsched.errors import AgentschedError, TestbedError
from agentsched.experiments.loadgen import run_against
from agentsched.experiments.traffic import seeded_arrivals
from agentsched.model.execution import Status
from agentsched.model.workflow import Mode
from agentsched.planner.traffic import TrafficPlanner
from agentsched.scenarios import resolve_workflow
from agentsched.service import Engine, ServiceConfig
from agentsched.service.realtime import SharedMachine
from agentsched.service.views import describe, history
from agentsched.testbeds.arrivals import Arrival
from agentsched.testbeds.spec import TestbedSpec
from agentsched.testbeds.stream import run_stream
from tests.service.test_realtime import SPEC, Clock, _runs_at

MIX = ["S1", "S7"]
SYNC_S = 60.0  # bounds the joins of the test's threads; not a timing check


def _config(tmp_path, **kw) -> ServiceConfig:
    base = dict(
        workflows=tuple(MIX),
        store=tmp_path / "s.db",
        testbed=TestbedSpec(kind="sim", noise_sigma=0.0),
        realtime=True,
        time_scale=1000.0,
        vram_budget_mb=2048.0,
        placement="live",
    )
    return ServiceConfig(**{**base, **kw})


@pytest.mark.parametrize("admission", [True, False])
def test_live_placement_on_the_shared_machine_is_agentsched_loads_planner(admission):
    """Runs arriving with no mapping get the planner's placement, task by task: the same invocations,
    mappings and latencies as ``agentsched load``'s stream simulator under ``agentsched`` (and, where
    no door holds an invocation while another's task waits for VRAM, under a crowd)."""
    wfs = [resolve_workflow(n) for n in MIX]
    arrivals = [
        Arrival(0.0, 0),
        Arrival(0.0, 1),
        Arrival(10.0, 1),
        Arrival(40.0, 0),
        Arrival(60.0, 1),
        Arrival(4000.0, 0),
    ]
    clock = Clock()
    machine = SharedMachine(wfs, SPEC, vram_budget_mb=2048.0, clock=clock, decider=TrafficPlanner(admission=admission))
    try:
        served = _runs_at(machine, clock, [(a.time_ms, wfs[a.workflow], {}) for a in arrivals])
    finally:
        machine.close()
    streamed = run_stream(
        wfs, arrivals, TrafficPlanner(admission=admission), vram_budget_mb=2048.0, noise_sigma=0.0, gpu_now_waits=True
    )
    assert [x.status.value for x in served] == [i.status for i in streamed.invocations] == ["ok"] * len(arrivals)
    assert [x.mapping for x in served] == [i.mapping for i in streamed.invocations]
    assert [x.e2e_ms for x in served] == pytest.approx([i.end_ms - i.arrival_ms for i in streamed.invocations])
    assert all(set(x.mapping) == set(wfs[a.workflow].task_ids) for x, a in zip(served, arrivals, strict=True))
    # under the tight budget the crowd changes the placement: not every S7 runs the mapping S7 alone gets
    s7 = [x.mapping for x, a in zip(served, arrivals, strict=True) if a.workflow == 1]
    assert machine.peak_reserved_mb <= 2048.0 and (admission or len({tuple(sorted(m.items())) for m in s7}) > 1)


def test_a_brought_mapping_still_runs_as_brought_and_none_without_live_placement_is_refused():
    wfs = [resolve_workflow("S1")]
    cpu = {t: Mode.CPU for t in wfs[0].task_ids}
    clock = Clock()
    machine = SharedMachine(wfs, SPEC, vram_budget_mb=2048.0, clock=clock, decider=TrafficPlanner())
    try:
        (x,) = _runs_at(machine, clock, [(0.0, wfs[0], cpu)])
    finally:
        machine.close()
    assert x.status is Status.OK and x.mapping == cpu
    plain = SharedMachine(wfs, SPEC, vram_budget_mb=2048.0, clock=Clock())
    try:
        with pytest.raises(TestbedError, match="places no task itself"):
            plain.run(wfs[0], {})
    finally:
        plain.close()


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(placement="nearest"), r"^placement is invalid \(input should be 'policy' or 'live'\), got 'nearest'$"),
        (
            dict(realtime=False, time_scale=1.0, vram_budget_mb=None),
            "^placement live needs the local testbed or the real-time simulator",
        ),
    ],
)
def test_bad_placement_options_are_one_line_errors(tmp_path, kw, message):
    with pytest.raises(AgentschedError, match=message):
        _config(tmp_path, **kw)


def test_the_service_records_live_invocations_outside_the_rounds_and_a_pin_still_wins(tmp_path):
    service = Engine(_config(tmp_path))
    try:
        results: list = [None] * 8
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, service.invoke(MIX[i % 2], {})))
            for i in range(len(results))
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(SYNC_S)
        assert all(r is not None and r.status is Status.OK and r.kind == "live" for r in results)
        for i, r in enumerate(results):
            wf = service.runtime(MIX[i % 2]).workflow
            assert set(r.mapping) == set(wf.task_ids) and set(r.mapping.values()) <= set(wf.decision_space.modes)
        rows = history(service, "S7", 100)
        assert [h.kind for h in rows] == ["live"] * 4 and all(h.seq is None for h in rows)
        assert describe(service, "S7").placement == "live" and describe(service, "S7").invocations == 4
        cpu = {t: "cpu" for t in service.runtime("S1").workflow.task_ids}
        service.runtime("S1").pin(cpu)
        pinned = service.invoke("S1", {})
        assert pinned.kind == "pinned" and {m.value for m in pinned.mapping.values()} == {"cpu"}
        assert describe(service, "S1").placement == "pinned"
    finally:
        service.close()


def test_a_stream_fired_at_a_live_placing_server(start_server, tmp_path):
    server = start_server(
        [
            *MIX,
            "--store",
            str(tmp_path / "l.db"),
            "--testbed",
            "sim",
            "--realtime",
            "--time-scale",
            "100",
            "--vram-budget-mb",
            "2048",
            "--placement",
            "live",
            "--max-concurrency",
            "1000",
        ]
    )
    arrivals = seeded_arrivals("poisson", 4.0, 5.0, MIX, seed=3)
    shots = run_against(server.url, arrivals, MIX, time_scale=100.0)
    assert len(shots) == len(arrivals) >= 5
    assert all(s.http_status == 200 and s.status == "ok" for s in shots), [s.message for s in shots]
    with server.client() as client:
        kinds = {h["kind"] for wf in MIX for h in client.get(f"/v1/workflows/{wf}/history").json()}
        assert kinds == {"live"}
        assert {w["placement"] for w in client.get("/v1/workflows").json()} == {"live"}
    assert server.stop() == 0


def test_a_restarted_service_counts_the_live_invocations_of_earlier_processes(tmp_path):
    for expected in (3, 6):
        service = Engine(_config(tmp_path))
        try:
            for _ in range(3):
                assert service.invoke("S1", {}).kind == "live"
            described = describe(service, "S1")
            assert described.invocations == expected and described.current_mapping is None
            assert described.placement == "live"
        finally:
            service.close()
