"""What a task's finish is worth under load: its invocation's predicted end (planner/traffic_slack.py),
and the GPU's time-averaged pressure as a floor for a new run (planner/traffic.py)."""

from __future__ import annotations

import random

from agentsched.model.live import Invocation, RunningView
from agentsched.model.workflow import Mode
from agentsched.planner.traffic import TrafficPlanner
from agentsched.planner.traffic_slack import InvocationEnds
from agentsched.scenarios import load_scenario
from tests.support.live import fake_live, view


def _inv(name: str, ready: str) -> Invocation:
    """An invocation of ``name`` in which only ``ready`` is ready."""
    wf = load_scenario(name)
    inv = Invocation(0, 0, wf, 0.0, wf.task_cards)
    inv.waiting_preds = {t: (0 if t == ready else 1) for t in wf.task_ids}
    return inv


def _planner(inv: Invocation) -> TrafficPlanner:
    p = TrafficPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    return p


def test_tail_is_the_longest_path_after_a_task_at_the_faster_card_times():
    wf = load_scenario("S1")  # A -> (B llama_1b 447 ms GPU || C sentiment 7 ms GPU) -> D web_search 127 ms CPU
    tails = InvocationEnds().tail_ms(wf)
    assert tails == {"A": 447.0 + 127.0, "B": 127.0, "C": 127.0, "D": 0.0}


def test_others_end_counts_placed_and_ready_siblings_never_before_now():
    inv = _inv("S5", "B")  # fan-out: every task overlaps every other
    ends = InvocationEnds()
    ends.placed(inv, "A", 900.0)
    assert ends.others_end_ms(inv, "B", 100.0, lambda u: 0.0) == 900.0
    assert ends.others_end_ms(inv, "B", 1000.0, lambda u: 0.0) == 1000.0  # A is late: now, not before
    inv.waiting_preds["C"] = 0  # C ready, not placed: its best finish from now
    assert ends.others_end_ms(inv, "B", 100.0, lambda u: 2000.0 if u == "C" else 0.0) == 2100.0
    assert ends.others_end_ms(inv, "A", 100.0, lambda u: 0.0) == 100.0  # A itself is not an "other"


def test_a_task_with_slack_leaves_a_crowded_gpu_one_on_the_critical_path_takes_it():
    ocr = load_scenario("S7").task_cards["A"]  # a sensitive GPU task of other invocations
    crowd = fake_live(gpu=[view(ocr, remaining=300.0)] * 2, budget=8192)
    alone = _inv("S10", "C")  # groupby_x60: 540 ms CPU, 120 ms GPU
    assert _planner(alone).place(alone, "C", crowd) is Mode.GPU_NOW
    with_slack = _inv("S10", "C")
    p = _planner(with_slack)
    with_slack.mapping["A"] = Mode.CPU
    p.ends.placed(with_slack, "A", 2772.0)  # its sibling ocr runs 2.8 s on the CPU anyway
    assert p.place(with_slack, "C", crowd) is Mode.CPU


def test_a_sensitive_task_meets_the_gpu_s_average_pressure_not_a_quiet_instant():
    inv = _inv("S10", "D")  # image_resize_x30: 510 ms CPU, 120 ms GPU
    card, clip = inv.cards["D"], load_scenario("S7").task_cards["B"]
    idle = fake_live(budget=8192, now_ms=120_000.0)  # two minutes later, the GPU happens to be free
    fresh = _planner(inv)
    busy = _planner(inv)
    for p in (fresh, busy):
        p.learner.params(clip)
        for _ in range(40):  # it learned: image_resize runs 5x slower beside clip
            p.learner.observe(card, Mode.GPU_NOW, 5 * card.gpu_ms, {"clip": 5 * card.gpu_ms})
    busy._gpu(fake_live(gpu=[view(clip, remaining=300.0)] * 3, budget=8192))  # clips ran for two minutes
    assert fresh.place(inv, "D", idle) is Mode.GPU_NOW
    assert busy.place(_inv("S10", "D"), "D", idle) is Mode.CPU


def test_a_sibling_on_a_long_cpu_run_does_not_drag_a_task_off_a_gpu_that_frees_soon():
    # the cascade under a full GPU: ocr (A) took a 2.8 s CPU run; resnet50_x15 (B, 3.2 s on the CPU,
    # 120 ms on the GPU) does not fit the VRAM now, but a co-runner frees it in 50 ms. Every option
    # ends the invocation near A's end, yet B's own CPU run is far longer than the wait and its run:
    # it holds for the GPU rather than take the CPU (which would end the invocation at 3.2 s)
    inv = _inv("S6", "B")
    p = _planner(inv)
    inv.mapping["A"] = Mode.CPU
    p.ends.placed(inv, "A", 2772.0)
    short = view(load_scenario("S2").task_cards["D"], remaining=50.0)
    full = fake_live(gpu=[short], budget=8192, vram=8192 - 100)
    assert p.place(inv, "B", full) is None
    assert p.place(inv, "B", fake_live(gpu=[short], budget=8192)) is Mode.GPU_NOW  # VRAM free: starts


def test_a_ready_sibling_waiting_for_vram_gives_no_slack():
    # ocr (A, 248 MB, 2.8 s on the CPU) is ready but does not fit now; two ocr runs near their end
    # free its VRAM within about 100 ms: it will hold (about 460 ms in all), not take the CPU, so
    # groupby (C, 61 MB, fits; 540 ms on the CPU) gets no slack from A's CPU run: it takes the GPU,
    # now or once the ending runs leave (None: held), not the CPU
    ocr = load_scenario("S7").task_cards["A"]
    ending = RunningView(ocr, Mode.GPU_NOW, 380.0, False, ocr.vram_needed_mb, 0.0)
    inv = _inv("S10", "C")
    inv.waiting_preds["A"] = 0  # A ready, not placed
    p = _planner(inv)
    assert p.place(inv, "C", fake_live(gpu=[ending] * 2, budget=8192, vram=8192 - 100)) is not Mode.CPU
