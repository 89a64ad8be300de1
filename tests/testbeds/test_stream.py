"""The stream simulator: agrees with the one-run simulator alone, shares GPU/VRAM/CPU across
invocations, ends an invocation as oom (not the stream), is deterministic under a seed."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import TestbedError
from agentsched.model.live import FasterDevice, StaticDecider
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.testbeds.arrivals import Arrival, poisson_arrivals
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.stream import run_stream


def _all(wf, mode):
    return {wf.name: {t: mode for t in wf.task_ids}}


@pytest.mark.parametrize(
    "name, mode", [("S1", Mode.GPU_NOW), ("S7", Mode.GPU_NOW), ("S11", Mode.GPU_QUEUE), ("S5", Mode.CPU)]
)
def test_one_invocation_alone_matches_the_one_run_simulator(name, mode):
    wf = load_scenario(name)
    mapping = {t: mode for t in wf.task_ids}
    want = SimTestbed(noise_sigma=0.0).expected(wf, mapping)
    res = run_stream([wf], [Arrival(0.0, 0)], StaticDecider({wf.name: mapping}), vram_budget_mb=None, cpu_slots=64)
    assert res.count("ok") == 1
    assert res.latencies_ms()[0] == pytest.approx(want.e2e_ms, rel=1e-9)


def test_invocations_contend_for_the_gpu():
    wf = load_scenario("S9")  # four GPU tools at once
    dec = StaticDecider(_all(wf, Mode.GPU_NOW))
    alone = run_stream([wf], [Arrival(0.0, 0)], dec, vram_budget_mb=None).latencies_ms()[0]
    two = run_stream([wf], [Arrival(0.0, 0), Arrival(0.0, 0)], dec, vram_budget_mb=None).latencies_ms()
    assert len(two) == 2 and min(two) > alone * 1.05


def test_cpu_slots_are_shared():
    wf = load_scenario("S5")
    dec = StaticDecider(_all(wf, Mode.CPU))
    alone = run_stream([wf], [Arrival(0.0, 0)], dec, vram_budget_mb=None, cpu_slots=4).latencies_ms()[0]
    two = sorted(run_stream([wf], [Arrival(0.0, 0)] * 2, dec, vram_budget_mb=None, cpu_slots=4).latencies_ms())
    assert two[0] == pytest.approx(alone) and two[1] > alone + 100  # the second waits for slots


def test_oom_ends_the_invocation_not_the_stream():
    wf = load_scenario("S1")  # llama_1b holds 2484 MB
    dec = StaticDecider(_all(wf, Mode.GPU_NOW))
    res = run_stream([wf], [Arrival(0.0, 0), Arrival(100.0, 0), Arrival(5000.0, 0)], dec, vram_budget_mb=3000)
    assert [i.status for i in res.invocations] == ["ok", "oom", "ok"]
    assert res.count("oom") == 1 and len(res.latencies_ms()) == 2


def test_vram_never_above_the_budget_and_queue_is_one_at_a_time():
    wfs = [load_scenario(n) for n in ("S11", "S12", "S13")]
    seen = []

    class Spy(FasterDevice):
        late_binding = True

        def place(self, inv, task, live):
            gpu = live.running(gpu=True)
            seen.append((live.vram_in_use_mb, sum(v.mode is Mode.GPU_QUEUE for v in gpu)))
            return Mode.GPU_QUEUE

    res = run_stream(
        wfs, poisson_arrivals(3.0, 20.0, 3, random.Random(0)), Spy(), vram_budget_mb=1700, noise_sigma=0.1, seed=3
    )
    assert res.count("ok") == len(res.invocations) > 20
    assert all(v <= 1700 + 1e-6 and q <= 1 for v, q in seen)


def test_deterministic_under_a_seed():
    wfs = [load_scenario(n) for n in ("S1", "S7", "S10")]
    arr = poisson_arrivals(4.0, 30.0, 3, random.Random(5))
    dec = StaticDecider({wf.name: {t: Mode.GPU_NOW for t in wf.task_ids} for wf in wfs})
    a = run_stream(wfs, arr, dec, vram_budget_mb=None, noise_sigma=0.1, seed=2).latencies_ms()
    b = run_stream(wfs, arr, dec, vram_budget_mb=None, noise_sigma=0.1, seed=2).latencies_ms()
    c = run_stream(wfs, arr, dec, vram_budget_mb=None, noise_sigma=0.1, seed=3).latencies_ms()
    assert a == b and a != c


def test_held_task_runs_on_the_cpu_when_nothing_else_can_free_a_resource():
    wf = load_scenario("S2")

    class HoldForever(FasterDevice):
        late_binding = True

        def place(self, inv, task, live):
            return None

    res = run_stream([wf], [Arrival(0.0, 0)], HoldForever(), vram_budget_mb=None)
    assert res.count("ok") == 1
    assert set(res.invocations[0].mapping.values()) == {Mode.CPU}


def test_admission_waits_and_counts_in_latency():
    wf = load_scenario("S2")

    class OneAtATime(FasterDevice):
        def admit(self, inv, live):
            return live.in_flight == 0

    res = run_stream([wf], [Arrival(0.0, 0), Arrival(0.0, 0)], OneAtATime(), vram_budget_mb=None)
    first, second = res.invocations
    assert second.admitted_ms == pytest.approx(first.end_ms)
    assert second.end_ms - second.arrival_ms > first.end_ms - first.arrival_ms


def test_an_invocation_at_the_door_is_admitted_when_the_last_one_in_flight_ends_as_oom():
    """The last invocation in flight ends as oom while its tasks are routed (no task end wakes the
    door after that): the one waiting is admitted then, not left to stall the stream."""
    wf = load_scenario("S1")  # whisper (442 MB), then llama_1b (2484 MB): over a 2048 MB budget

    class AllGpuOneAtATime(StaticDecider):
        def admit(self, inv, live):
            return live.in_flight == 0

    res = run_stream(
        [wf], [Arrival(0.0, 0), Arrival(1.0, 0)], AllGpuOneAtATime(_all(wf, Mode.GPU_NOW)), vram_budget_mb=2048
    )
    first, second = res.invocations
    assert first.status == second.status == "oom"
    assert second.admitted_ms == pytest.approx(first.end_ms)


def test_mode_outside_the_decision_space_is_an_error():
    wf = load_scenario("S1")  # binary
    res = run_stream([wf], [Arrival(0.0, 0)], StaticDecider(_all(wf, Mode.GPU_QUEUE)), vram_budget_mb=None)
    assert res.count("error") == 1


def test_bad_machine_is_one_line():
    wf = load_scenario("S1")
    with pytest.raises(TestbedError, match="cpu_slots"):
        run_stream([wf], [], FasterDevice(), vram_budget_mb=None, cpu_slots=0)
    with pytest.raises(TestbedError, match="vram_budget_mb"):
        run_stream([wf], [], FasterDevice(), vram_budget_mb=-1)


def test_task_done_reports_overlap_by_unit_tool():
    wf = load_scenario("S9")
    reports = []

    class Rec(StaticDecider):
        def observe(self, done):
            reports.append(done)

    run_stream([wf], [Arrival(0.0, 0)], Rec(_all(wf, Mode.GPU_NOW)), vram_budget_mb=None)
    clip = next(d for d in reports if d.card.name.startswith("clip"))
    assert set(clip.overlap_ms) == {"whisper_base", "resnet50", "image_resize"}
    assert all(0 < ms <= clip.run_ms + 1e-6 for ms in clip.overlap_ms.values())


def test_gpu_now_waits_for_vram_other_invocations_hold_never_for_its_own():
    wf = load_scenario("S1")
    mapping = {t: Mode.GPU_NOW if c.has_gpu else Mode.CPU for t, c in wf.task_cards.items()}
    alone = SimTestbed(noise_sigma=0.0).expected(wf, mapping)
    two = [Arrival(0.0, 0), Arrival(10.0, 0)]
    kw = {"vram_budget_mb": alone.peak_vram_mb + 1.0, "noise_sigma": 0.0}  # one fits, not two
    plain = run_stream([wf], two, StaticDecider({wf.name: mapping}), **kw)
    waits = run_stream([wf], two, StaticDecider({wf.name: mapping}), **kw, gpu_now_waits=True)
    assert sorted(i.status for i in plain.invocations) == ["ok", "oom"]  # the stream's rule: oom at once
    assert [i.status for i in waits.invocations] == ["ok", "ok"]  # the service's: the second waited
    assert waits.invocations[1].end_ms - waits.invocations[1].arrival_ms > alone.e2e_ms
    tight = {"vram_budget_mb": alone.peak_vram_mb - 1.0, "noise_sigma": 0.0}  # too small alone: still oom
    assert [
        i.status
        for i in run_stream([wf], two[:1], StaticDecider({wf.name: mapping}), **tight, gpu_now_waits=True).invocations
    ] == ["oom"]
