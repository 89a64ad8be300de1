"""The load-aware planner: never an oom, holds rather than a bad start, learns contention online
across invocations, admission while a task waits for VRAM or both devices are saturated."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from agentsched.experiments.traffic import percentile
from agentsched.model.cards import split_amplified
from agentsched.model.generate import generate_workflow
from agentsched.model.live import Invocation
from agentsched.model.workflow import Mode
from agentsched.planner.prior import contention_prior
from agentsched.planner.traffic import (
    TimeAverage,
    TrafficPlanner,
    cpu_harm_ms,
    door_harm_ms,
    vram_free_ms,
    waits_for_one_run,
)
from agentsched.planner.traffic_learn import ContentionLearner, MeasuredRatio
from agentsched.policies.traffic.baselines import AllGpu, Dmda, WithAdmission
from agentsched.scenarios import load_scenario
from agentsched.testbeds.arrivals import poisson_arrivals
from agentsched.testbeds.stream import run_stream
from tests.support.live import fake_live, view


def _inv(name):
    wf = load_scenario(name)
    return Invocation(0, 0, wf, 0.0, wf.task_cards)


def test_never_oom_where_all_gpu_runs_out_of_vram():
    wfs = [load_scenario(n) for n in ("S1", "S4", "S7", "S11")]
    arr = poisson_arrivals(3.0, 60.0, len(wfs), random.Random(1))
    kw = {"vram_budget_mb": 4000, "noise_sigma": 0.05, "seed": 1}
    ours = run_stream(wfs, arr, TrafficPlanner(), **kw)
    theirs = run_stream(wfs, arr, AllGpu(), **kw)
    assert theirs.count("oom") > 0
    assert ours.count("oom") == 0 and ours.count("ok") == len(arr)


def test_holds_a_gpu_task_whose_vram_frees_soon_rather_than_a_slow_cpu_run():
    inv = _inv("S1")  # B: llama_1b, 447 ms GPU, 8.5 s CPU, 2484 MB
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    short = view(_inv("S2").cards["D"], remaining=50.0)  # a reranker ending soon holds the VRAM
    live = fake_live(gpu=[short], budget=2600, vram=2600 - 100)
    assert p.place(inv, "B", live) is None
    assert p.place(inv, "B", fake_live(budget=2600)) is Mode.GPU_NOW  # free GPU: start now


def test_the_wait_for_vram_is_the_end_of_the_runs_that_must_free_it():
    from agentsched.planner.traffic import _Gpu

    by_end = [
        _Gpu(100.0, 500.0, 1.0, 1.0, False),
        _Gpu(300.0, 1000.0, 1.0, 1.0, False),
        _Gpu(900.0, 2000.0, 1.0, 1.0, False),
    ]
    assert vram_free_ms(400.0, by_end, 3500.0, 4000.0) == (0.0, 0)  # fits now
    assert vram_free_ms(800.0, by_end, 3500.0, 4000.0) == (100.0, 1)  # once the first ends
    assert vram_free_ms(1500.0, by_end, 3500.0, 4000.0) == (300.0, 2)
    assert vram_free_ms(800.0, by_end, 3500.0, None) == (0.0, 0)  # no budget


def test_the_gpu_queue_is_priced_with_the_wait_for_its_vram():
    """The queue admits its head only once its VRAM fits: priced by its backlog alone, a large model
    went to the queue as if it started at once, and waited there 30-40 s on a full GPU."""
    inv = _inv("S11")  # three-way; B: clip_x12
    card = inv.cards["B"]
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    llama = _inv("S1").cards["B"]  # llama_1b, 447 ms on the GPU, 2484 MB
    budget = llama.vram_needed_mb + card.vram_needed_mb
    fits = fake_live(gpu=[view(llama)], budget=budget, vram=llama.vram_needed_mb)
    full = fake_live(gpu=[view(llama)], budget=budget - 1.0, vram=llama.vram_needed_mb)
    q_fits = p._queue_ms(card, p._gpu(fits), fits)[0]
    q_full = p._queue_ms(card, p._gpu(full), full)[0]
    assert q_full - q_fits == pytest.approx(p._gpu(full)[0].remaining_ms) and q_full - q_fits >= llama.gpu_ms


def test_the_gpu_queue_waits_for_the_vram_of_a_larger_task_queued_before_it():
    inv = _inv("S11")
    card = inv.cards["B"]  # clip_x12, small
    big = _inv("S1").cards["B"]  # llama_1b, 2484 MB, queued first: the queue's head
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    running = _inv("S2").cards["D"]  # a reranker holds some VRAM
    budget = running.vram_needed_mb + big.vram_needed_mb - 1.0  # the head fits once it ends, not before
    live = fake_live(gpu=[view(running)], budget=budget, vram=running.vram_needed_mb)
    alone = p._queue_ms(card, p._gpu(live), live)[0]
    live = fake_live(gpu=[view(running)], budget=budget, vram=running.vram_needed_mb, queue=1, queued_cards=[big])
    behind = p._queue_ms(card, p._gpu(live), live)[0]
    assert behind - alone == pytest.approx(p._gpu(live)[0].remaining_ms)


def test_a_queued_start_whose_vram_does_not_fit_now_is_priced_as_uncertain_as_a_hold():
    from agentsched.planner.traffic import _Cost
    from agentsched.planner.traffic_config import DEFAULT_CONFIG

    VRAM_HOLD_MARGIN = DEFAULT_CONFIG.vram_hold_margin

    inv = _inv("S11")
    card = inv.cards["B"]
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    llama = _inv("S1").cards["B"]
    live = fake_live(
        gpu=[view(llama)], budget=llama.vram_needed_mb + card.vram_needed_mb - 1.0, vram=llama.vram_needed_mb
    )
    gpu = p._gpu(live)
    q = p._queue_ms(card, gpu, live)[0]
    cost = _Cost(0.0, 0.0)
    # the queue wins against a CPU run only beyond its finish stretched (a CPU run between the two
    # took the queue before)
    assert p._best_start(inv, card, gpu, live, 1.05 * q / VRAM_HOLD_MARGIN, False, 0.0, cost)[0] is Mode.GPU_QUEUE
    assert p._best_start(inv, card, gpu, live, 0.95 * q / VRAM_HOLD_MARGIN, False, 0.0, cost)[0] is Mode.CPU
    assert 0.95 / VRAM_HOLD_MARGIN > 1.0


def test_a_task_larger_than_the_budget_goes_to_the_cpu():
    inv = _inv("S1")
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    assert p.place(inv, "B", fake_live(budget=2000)) is Mode.CPU


def test_learns_contention_across_invocations():
    wfs = [load_scenario(n) for n in ("S7", "S9")]  # clip presses hard in the default world
    p = TrafficPlanner()
    run_stream(wfs, poisson_arrivals(3.0, 200.0, 2, random.Random(2)), p, vram_budget_mb=None, seed=2)
    clip = wfs[0].task_cards["B"]
    assert p.learner.runs > 50
    assert p.learner.params(clip)[1] > 1.5 * contention_prior(clip.tags)[1]  # toward the world's 2.9


def test_learner_moves_sensitivity_toward_the_observed_slowdown():
    inv = _inv("S7")
    card = inv.cards["A"]  # ocr_x2
    other = inv.cards["B"]  # clip_x12
    learner = ContentionLearner()
    learner.params(other)
    s0 = learner.params(card)[0]
    for _ in range(30):  # ran 3x its card time beside clip for its whole run
        learner.observe(card, Mode.GPU_NOW, 3 * card.gpu_ms, {"clip": 3 * card.gpu_ms})
    assert learner.params(card)[0] > 2 * s0


def test_admission_only_when_both_devices_are_saturated():
    inv = _inv("S2")
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    clip = _inv("S7").cards["B"]
    crowd = [view(clip)] * 6
    cpu = [view(inv.cards["C"], Mode.CPU)] * 4
    assert p.admit(inv, fake_live(gpu=crowd))  # CPU free
    assert not p.admit(inv, fake_live(gpu=crowd, cpu=cpu, slots=4, waiting=3, waiting_ms=900.0))
    assert TrafficPlanner(admission=False).admit(inv, fake_live(gpu=crowd, cpu=cpu, slots=4, waiting=3))


def test_no_invocation_is_admitted_while_a_task_waits_for_vram():
    """Before, the door opened whenever the CPU had a free slot: under a superlinear contention law
    the GPU, full, got ever more work and throughput collapsed (p99 42x dmda+adm's, docs/load.md)."""
    inv = _inv("S1")  # B: llama_1b, 2484 MB
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    short = view(_inv("S2").cards["D"], remaining=50.0)
    full = fake_live(gpu=[short], budget=2600, vram=2600 - 100)
    other = _inv("S2")
    assert p.admit(other, full)  # a GPU nearly full, the CPU free, nothing waits: admitted
    assert p.place(inv, "B", full) is None  # held: its VRAM does not fit
    assert not p.admit(other, full)  # a task waits for VRAM: the door waits too
    assert p.admit(other, fake_live(budget=2600))  # its VRAM would fit now: the door opens
    assert p.place(inv, "B", fake_live(budget=2600)) is Mode.GPU_NOW
    assert p.admit(other, full)  # it started: nothing waits
    assert TrafficPlanner(admission=False).admit(other, full)


def test_a_wait_for_one_running_task_alone_is_told_from_a_wait_for_the_crowd():
    assert waits_for_one_run(6440, 6440, 6940, 12288)  # the other copy of a 6.4 GB model: its end alone
    assert not waits_for_one_run(3000, 3000, 8000, 8192)  # it would fit beside the largest: the crowd must thin
    assert not waits_for_one_run(6440, 2000, 8000, 8192)  # the largest's end is not enough
    assert not waits_for_one_run(6440, 6440, 6940, None)


def test_the_door_stays_open_while_a_task_waits_for_one_run_alone():
    """A model of which one copy fits at a time waits for the copy running, which new invocations do
    not prolong. Before, the door shut behind it too, and every invocation waited at the door (a sweep
    draw: llama_3b on 12,288 MB, 6.6 s at the door on average, p50 1.97x dmda+adm's at 90% load)."""
    inv, other = _inv("S1"), _inv("S2")  # S1's B: llama_1b, 2484 MB
    p = TrafficPlanner()
    p.start_stream([inv.workflow, other.workflow], random.Random(0))
    copy = view(inv.cards["B"], remaining=300.0)  # another invocation's llama_1b, running
    one_run = fake_live(gpu=[copy], budget=4000, vram=2484 + 300)
    assert p.place(inv, "B", one_run) is None  # held: its VRAM does not fit beside the copy
    assert p.admit(other, one_run)  # ...until the copy ends, whatever else arrives: the door stays open
    crowd = fake_live(gpu=[view(other.cards[t], remaining=300.0) for t in "ABCD"], budget=4000, vram=3000)
    assert p.place(inv, "B", crowd) is None
    assert not p.admit(other, crowd)  # a wait for several runs to end, each new invocation prolongs: shut


def test_a_time_average_holds_each_sample_until_the_next():
    avg = TimeAverage(tau_ms=1000.0)
    avg.sample(0.0, 10.0)
    assert avg.value == 0.0  # nothing has been held yet
    avg.sample(1000.0, 0.0)  # 10 held for one time constant
    assert avg.value == pytest.approx(10.0 * (1.0 - math.exp(-1.0)))
    avg.sample(1000.0, 0.0)  # no time passed: unchanged
    assert avg.value == pytest.approx(10.0 * (1.0 - math.exp(-1.0)))


def test_a_hold_for_vram_delays_each_invocation_at_the_door_by_its_run():
    assert door_harm_ms(447.0, 0) == 0.0
    assert door_harm_ms(447.0, 3) == 3 * 447.0


def test_a_small_hold_for_vram_delays_the_door_by_its_share_of_the_vram_time():
    """Tasks run side by side while their VRAM fits: a 656 MB hold on 8192 MB keeps the door shut
    for its share of the VRAM-time, not a whole run (a5500-saturating, S4+S9+S11: 0.906x dmda+adm's
    sustained rate when charged the whole run; docs/load.md)."""
    assert door_harm_ms(190.0, 100, 656.0 / 8192.0) == pytest.approx(190.0 * 100 * 656.0 / 8192.0)
    assert door_harm_ms(768.0, 2, 1.3) == 2 * 768.0  # a model larger than the budget: the whole run, no more


def test_a_hold_for_vram_counts_the_invocations_it_keeps_at_the_door_for_minutes_not_a_burst():
    """Before, the door's backlog was invisible to placement: under overload a 6.4 GB model kept
    waiting for the GPU while invocations waited at the door and CPU slots idled (docs/load.md).
    Counted as a time average: a burst that crowds the door for seconds sends nothing to the CPU."""
    inv = _inv("S1")  # B: llama_1b, 447 ms GPU, 8.5 s CPU, 2484 MB
    short = view(_inv("S2").cards["D"])  # a short reranker holds the VRAM

    def place(door, since_ms, admission=True):
        p = TrafficPlanner(admission=admission)
        p.start_stream([inv.workflow], random.Random(0))
        p.admit(_inv("S2"), fake_live(door=door))  # the door is seen crowded from time 0 on...
        p.place(Invocation(1, 0, inv.workflow, 0.0, inv.cards), "A", fake_live(door=door))  # ...by both calls
        live = fake_live(gpu=[short], budget=2600, vram=2600 - 100, door=door, now_ms=since_ms)
        return p.place(inv, "B", live)

    assert place(door=0, since_ms=600_000.0) is None  # a short wait for the VRAM: held
    assert place(door=5, since_ms=600_000.0) is None
    assert place(door=40, since_ms=2_000.0) is None  # a burst: held
    assert place(door=40, since_ms=600_000.0) is Mode.CPU  # 40 for minutes would each wait its run
    # no door of its own: what waits there is not its doing
    assert place(door=40, since_ms=600_000.0, admission=False) is None


def test_while_invocations_wait_at_the_door_a_cpu_run_is_charged_the_queues_delay():
    inv = _inv("S2")  # B: doc_merger; its sibling C neither placed nor ready: no slack

    def place(door):
        p = TrafficPlanner()
        p.start_stream([inv.workflow], random.Random(0))
        clips = [view(_inv("S7").cards["B"], remaining=3000.0)] * 2  # a contended GPU
        busy = [view(inv.cards["B"], Mode.CPU)] * 4
        return p.place(inv, "B", fake_live(gpu=clips, cpu=busy, slots=4, waiting=6, door=door))

    assert place(door=0) is Mode.CPU  # no slack, nobody at the door: its CPU run alone counts
    assert place(door=3) is Mode.GPU_NOW  # the door is crowded: the six waiting for a slot count too


def test_a_cpu_run_is_free_to_others_only_while_no_task_waits_for_a_slot():
    card = load_scenario("S7").task_cards["B"]  # clip: 2.6 s on the CPU
    assert cpu_harm_ms(card, fake_live(slots=4, waiting=0)) == 0.0
    one, three = cpu_harm_ms(card, fake_live(slots=4, waiting=1)), cpu_harm_ms(card, fake_live(slots=4, waiting=3))
    assert one == card.cpu_ms / 4 and three == 3 * one  # its slot time, over the slots, per task waiting
    assert cpu_harm_ms(card, fake_live(slots=8, waiting=3)) == three / 2  # more slots drain the queue faster


def test_slow_cpu_runs_with_slack_do_not_saturate_the_cpu_under_load():
    # vector_search (3 s CPU, 1.2 s GPU, 3 GB) beside clip (2 s CPU, 0.1 s GPU): with vector_search on
    # the CPU clip has slack, and priced free on the CPU it took a slot for 2 s; at 5.8 invocations/s
    # (90% of this mix's capacity) the CPU saturated and the backlog grew: p50 20 s against 2.9 s
    wfs = [
        generate_workflow(tasks=3, topology="layered", space="three_way", seed=117, index=0),
        generate_workflow(tasks=7, topology="fan-out", space="binary", seed=117, index=1),
    ]
    arr = poisson_arrivals(5.8, 300.0, 2, random.Random("arrivals:0"))
    kw = {"vram_budget_mb": 8192, "cpu_slots": 16, "noise_sigma": 0.03, "seed": 0, "world": "a5500-heavy"}
    ours = run_stream(wfs, arr, TrafficPlanner(), **kw)
    theirs = run_stream(wfs, arr, WithAdmission(Dmda()), **kw)
    assert ours.count("ok") == theirs.count("ok") == len(arr)
    p50 = percentile(ours.latencies_ms(), 0.5)
    assert p50 <= 1.25 * percentile(theirs.latencies_ms(), 0.5)


def test_a_cpu_run_that_sets_its_invocations_end_is_not_charged_the_queues_delay():
    # image_resize_x220 (3.7 s CPU, 0.9 s GPU, sensitivity 5.4) is the longest task of its fan-out:
    # charged the CPU queue's delay too (4 slots, often saturated), it went to the GPU, where beside
    # the chain's long GPU tasks it ran up to 20x its card: p99 1.9x dmda+adm's on this stream
    wfs = [
        generate_workflow(tasks=10, topology="fan-out", space="three_way", seed=41, index=0),
        generate_workflow(tasks=8, topology="chain", space="three_way", seed=41, index=1),
    ]
    arr = poisson_arrivals(0.75, 900.0, 2, random.Random("arrivals:0"))  # about 60% of the capacity
    kw = {"vram_budget_mb": 12288, "cpu_slots": 4, "noise_sigma": 0.03, "seed": 0}
    ours = run_stream(wfs, arr, TrafficPlanner(), **kw)
    theirs = run_stream(wfs, arr, WithAdmission(Dmda()), **kw)
    assert ours.count("ok") == len(arr)
    assert percentile(ours.latencies_ms(), 0.99) <= 1.4 * percentile(theirs.latencies_ms(), 0.99)


class _Recorded(MeasuredRatio):
    """MeasuredRatio that keeps, for each GPU run, (its tool, predicted before the factor, the factor then,
    the run)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[str, float, float, float]] = []
        self._at_start: dict = {}

    def started(self, invocation, task, card, predicted_ms):
        self._at_start[(invocation, task)] = (split_amplified(card.name)[0], predicted_ms, self.factor(card))
        super().started(invocation, task, card, predicted_ms)

    def observe(self, invocation, task, mode, run_ms):
        start = self._at_start.pop((invocation, task), None)
        if start is not None and mode is Mode.GPU_NOW:
            self.runs.append((*start, run_ms))
        super().observe(invocation, task, mode, run_ms)


class _RecordingPlanner(TrafficPlanner):
    def start_stream(self, workflows, rng):
        super().start_stream(workflows, rng)
        self.measured = _Recorded()


def test_predictions_scaled_by_what_was_measured_are_closer_to_the_runs():
    # a superlinear world the planner never sees: tools run longer in the crowd than the linear law
    # it learns can say (and co-runners start after them); the measured ratio corrects the next
    # predictions of each tool
    wfs = [
        generate_workflow(tasks=6, topology="chain", space="binary", seed=312, index=0),
        generate_workflow(tasks=5, topology="fan-out", space="binary", seed=312, index=1),
    ]
    planner = _RecordingPlanner()
    run_stream(
        wfs,
        poisson_arrivals(2.0, 300.0, 2, random.Random(0)),
        planner,
        vram_budget_mb=24576.0,
        cpu_slots=16,
        world="a5500-power",
        seed=0,
    )
    later = planner.measured.runs[len(planner.measured.runs) // 2 :]  # once runs of each tool were measured
    by_tool: dict[str, list] = {}
    for tool, predicted, f, run in later:
        by_tool.setdefault(tool, []).append((math.log(run / predicted), math.log(run / (predicted * f))))
    bias = {
        t: (abs(statistics.fmean(r for r, _ in v)), abs(statistics.fmean(c for _, c in v)))
        for t, v in by_tool.items()
        if len(v) >= 10
    }
    assert len(bias) >= 3
    assert all(scaled <= raw + 0.02 for raw, scaled in bias.values()), bias  # no tool's bias grows
    raw, scaled = (sum(b[i] for b in bias.values()) for i in (0, 1))
    assert raw > 0.05 and scaled < 0.5 * raw, bias  # the model's bias, at least halved once measured


def test_the_planner_scales_its_gpu_run_by_the_measured_ratio_and_records_the_raw_prediction():
    inv = _inv("S7")
    clip, ocr = inv.cards["B"], inv.cards["A"]
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    gpu = p._gpu(fake_live(gpu=[view(clip)]))
    run, harm = p._run_beside(ocr, gpu)
    p.measured.log_ratio["ocr"] = math.log(2.0)  # its runs took twice the prediction
    assert p._run_beside(ocr, gpu) == (2.0 * run, harm)  # the run it predicts now; the harm it inflicts as before
    started: list[float] = []
    p.measured.started = lambda invocation, task, card, predicted_ms: started.append(predicted_ms)
    p._placed(inv, "A", fake_live(), Mode.GPU_NOW, 2.0 * run)
    p._placed(inv, "B", fake_live(), Mode.CPU, 5000.0)  # a CPU placement predicts no GPU run
    assert started == [pytest.approx(run)]  # compared with the run when it ends, before the factor


def test_a_tool_measured_far_slower_than_predicted_goes_to_the_gpu_less():
    wfs = [load_scenario(n) for n in ("S7", "S11")]
    arrivals = poisson_arrivals(2.0, 120.0, 2, random.Random(3))

    def ocr_gpu_starts(log_ratio: float) -> int:
        class Pinned(MeasuredRatio):  # the ratio held where the test puts it
            def observe(self, *args):
                pass

        planner = TrafficPlanner()
        original = planner.start_stream

        def start(workflows, rng):
            original(workflows, rng)
            planner.measured = Pinned()
            planner.measured.log_ratio["ocr"] = log_ratio

        planner.start_stream = start
        res = run_stream(wfs, arrivals, planner, vram_budget_mb=8192.0, seed=3)
        return sum(inv.mapping.get("A") is Mode.GPU_NOW for inv in res.invocations)

    measured_slow, as_predicted = ocr_gpu_starts(math.log(20.0)), ocr_gpu_starts(0.0)
    assert as_predicted > 20 and measured_slow < as_predicted / 2, (measured_slow, as_predicted)


def test_an_invocation_that_ended_leaves_no_held_task_and_no_pending_prediction():
    from agentsched.scenarios import resolve_workflow

    planner = TrafficPlanner()
    wf = resolve_workflow("S1")
    inv = Invocation(7, 0, wf, 0.0, wf.task_cards)
    inv.left = 2  # ended early: two of its tasks never finished
    planner._held[(7, "A")] = 100.0
    planner._held[(8, "A")] = 50.0
    planner._held_since[(7, "A")] = 0.0
    planner.measured.started(7, "B", wf.task_cards["B"], 40.0)
    planner._ahead_ms((8, "A"))  # (prefix sums built with 7's hold ahead of 8's)
    planner.ended(inv)
    assert planner._held == {(8, "A"): 50.0} and planner._held_since == {}
    assert planner.measured._pending == {} and planner._ahead_ms((8, "A")) == 0.0
