"""The real-time simulator's shared machine (in process, on a clock the test moves)."""

from __future__ import annotations

import threading
import time

import pytest

from agentsched.model.execution import Execution, Status
from agentsched.model.live import StaticDecider
from agentsched.model.workflow import Mode
from agentsched.scenarios import resolve_workflow
from agentsched.service.realtime import RealtimeTestbed, SharedMachine
from agentsched.testbeds.arrivals import Arrival
from agentsched.testbeds.spec import TestbedSpec
from agentsched.testbeds.stream import run_stream

SPEC = TestbedSpec(kind="sim", noise_sigma=0.0)
SYNC_S = 30.0  # bounds the waits for the test's threads; not a timing check


class Clock:
    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def _gpu_mapping(wf):
    return {t: Mode.GPU_NOW if c.has_gpu else Mode.CPU for t, c in wf.task_cards.items()}


def _wait_for(cond) -> None:
    end = time.monotonic() + SYNC_S
    while not cond():
        assert time.monotonic() < end, "the machine did not take the run"
        time.sleep(0.001)


def _runs_at(machine: SharedMachine, clock: Clock, jobs) -> list[Execution]:
    """Each (time_ms, workflow, mapping) arrives at that simulated time; then the clock runs out."""
    out: list[Execution | None] = [None] * len(jobs)
    threads = []
    for i, (t_ms, wf, mapping) in enumerate(jobs):
        clock.s = t_ms / 1000.0
        th = threading.Thread(target=lambda i=i, wf=wf, m=mapping: out.__setitem__(i, machine.run(wf, m)))
        th.start()
        threads.append(th)
        _wait_for(lambda n=i + 1: len(machine.sim.invocations) == n)
    clock.s = 1e6
    machine.poke()
    for th in threads:
        th.join(SYNC_S)
    assert all(x is not None for x in out)
    return out  # type: ignore[return-value]


def test_runs_on_the_shared_machine_are_the_stream_simulators_runs():
    wfs = [resolve_workflow("S1"), resolve_workflow("S7")]
    mappings = {wf.name: _gpu_mapping(wf) for wf in wfs}
    arrivals = [Arrival(0.0, 0), Arrival(0.0, 1), Arrival(20.0, 0), Arrival(300.0, 1), Arrival(5000.0, 0)]
    clock = Clock()
    machine = SharedMachine(wfs, SPEC, vram_budget_mb=8192.0, clock=clock)
    try:
        served = _runs_at(
            machine, clock, [(a.time_ms, wfs[a.workflow], mappings[wfs[a.workflow].name]) for a in arrivals]
        )
    finally:
        machine.close()
    streamed = run_stream(
        wfs, arrivals, StaticDecider(mappings), vram_budget_mb=8192.0, noise_sigma=0.0, gpu_now_waits=True
    )
    assert [x.status.value for x in served] == [i.status for i in streamed.invocations]
    assert [x.e2e_ms for x in served] == [i.end_ms - i.arrival_ms for i in streamed.invocations]
    alone = served[-1]  # arrives after the others ended: uncontended
    assert served[0].e2e_ms > alone.e2e_ms  # S1 beside S7 and another S1: contention across invocations
    assert {s.task for s in alone.spans} == set(wfs[0].task_ids)
    assert 0 < machine.peak_reserved_mb <= 8192.0 and machine.reserved_mb == 0.0


def test_a_gpu_start_that_does_not_fit_beside_the_others_waits_for_their_vram():
    wf = resolve_workflow("S1")
    clock = Clock()
    alone = SPEC.build().expected(wf, _gpu_mapping(wf))
    budget = alone.peak_vram_mb + 1.0  # one run fits alone, not two
    machine = SharedMachine([wf], SPEC, vram_budget_mb=budget, clock=clock)
    try:
        first, second, cpu = _runs_at(
            machine,
            clock,
            [
                (0.0, wf, _gpu_mapping(wf)),
                (40.0, wf, _gpu_mapping(wf)),
                (50.0, wf, dict.fromkeys(wf.task_ids, Mode.CPU)),
            ],
        )
    finally:
        machine.close()
    assert first.ok and second.ok  # co-scheduling never causes an oom: the second waited for the VRAM
    assert second.e2e_ms > alone.e2e_ms  # ... and paid for the wait
    assert machine.peak_reserved_mb <= budget
    assert cpu.ok and cpu.peak_vram_mb == 0  # CPU-only runs hold no VRAM


def test_a_mapping_that_runs_out_of_vram_alone_is_still_an_oom():
    wf = resolve_workflow("S1")
    alone = SPEC.build().expected(wf, _gpu_mapping(wf))
    clock = Clock()
    machine = SharedMachine([wf], SPEC, vram_budget_mb=alone.peak_vram_mb - 1.0, clock=clock)
    try:
        (x,) = _runs_at(machine, clock, [(0.0, wf, _gpu_mapping(wf))])
    finally:
        machine.close()
    assert x.status is Status.OOM and "alone" in x.message


def test_the_realtime_testbed_hands_runs_to_the_machine():
    wf = resolve_workflow("S1")
    machine = SharedMachine([wf], SPEC, vram_budget_mb=None, time_scale=1e6)
    tb = RealtimeTestbed(SPEC.build(), machine)
    try:
        x = tb.run(wf, _gpu_mapping(wf))
        # alone: the one-run simulator's E2E (to rounding: it arrived at a clock time, not at 0)
        assert x.ok and x.e2e_ms == pytest.approx(tb.expected(wf, _gpu_mapping(wf)).e2e_ms, rel=1e-9)
    finally:
        tb.close()
        machine.close()


def test_time_scale_and_budget_options_are_checked_in_one_line(tmp_path):
    from agentsched.errors import AgentschedError
    from agentsched.service.config import ServiceConfig

    with pytest.raises(AgentschedError, match=r"^time_scale applies only to the real-time simulator") as e:
        ServiceConfig(workflows=("S1",), store=tmp_path / "s.db", time_scale=10.0)
    assert e.value.field == "time_scale"
    with pytest.raises(AgentschedError, match=r"^time_scale is invalid \(input should be greater than 0\), got 0.0$"):
        ServiceConfig(workflows=("S1",), store=tmp_path / "s.db", testbed=SPEC, realtime=True, time_scale=0.0)
    with pytest.raises(
        AgentschedError, match=r"^vram_budget_mb must be a finite number > 0 \(none: omit it\), got -1$"
    ):
        ServiceConfig(workflows=("S1",), store=tmp_path / "s.db", testbed=SPEC, realtime=True, vram_budget_mb=-1.0)


def test_served_workflows_plan_for_the_gpu_they_share(tmp_path):
    """Before, S1 served beside S13 (1,100 MB) planned for no budget: its first rounds placed llama_1b
    (2,484 MB) on the GPU, and every invocation of them was an oom."""
    from agentsched.errors import WorkflowError
    from agentsched.service import Engine, ServiceConfig

    config = ServiceConfig(
        workflows=("S1", "S13"), store=tmp_path / "s.db", testbed=SPEC, realtime=True, time_scale=1e6
    )
    service = Engine(config)
    try:
        rt = service.runtimes["S1"]
        assert rt.workflow.vram_budget_mb == 1100.0 == service.runtimes["S13"].workflow.vram_budget_mb
        results = [rt.invoke() for _ in range(5)]  # round 0
        assert [r.status for r in results] == [Status.OK] * 5, [r.message for r in results]
    finally:
        service.close()
    with pytest.raises(WorkflowError, match="vram_budget_mb 100 is below every tool's VRAM"):
        Engine(
            ServiceConfig(workflows=("S1",), store=tmp_path / "t.db", testbed=SPEC, realtime=True, vram_budget_mb=100.0)
        )
    assert not (tmp_path / "t.db").exists()


def test_a_restarted_service_counts_every_stored_invocation_while_it_replays(tmp_path, monkeypatch):
    """Before, `invocations` right after a restart counted only those replayed so far (116 of 203)."""
    from agentsched.runtime.history import LearnerHistory
    from agentsched.service import Engine, ServiceConfig
    from agentsched.service.views import describe

    config = ServiceConfig(
        workflows=("S1",), store=tmp_path / "s.db", testbed=SPEC, realtime=True, time_scale=1e6, round_size=3
    )
    first = Engine(config)
    try:
        assert all(first.runtimes["S1"].invoke().ok for _ in range(6))
    finally:
        first.close()
    go, stored = threading.Event(), LearnerHistory.stored

    def slow_replay(self, seq, mapping):  # the replay stops after its first 2 places until `go`
        if seq >= 2:
            assert go.wait(SYNC_S)
        return stored(self, seq, mapping)

    monkeypatch.setattr(LearnerHistory, "stored", slow_replay)
    again = Engine(config)
    try:
        _wait_for(lambda: again.runtimes["S1"].replayed == 2)
        d = describe(again, "S1")
        assert (d.replayed, d.invocations) == (2, 6)
    finally:
        go.set()
        again.close()
