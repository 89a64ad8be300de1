"""The load-aware planner: never an oom, holds rather than a bad start, learns contention online
across invocations, admission when both devices are saturated."""

from __future__ import annotations

import random

from agentsched.model.live import Invocation
from agentsched.model.workflow import Mode
from agentsched.planner.load import LoadPlanner
from agentsched.planner.load_learn import ContentionLearner
from agentsched.planner.prior import contention_prior
from agentsched.policies.load.baselines import AllGpu
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
    ours = run_stream(wfs, arr, LoadPlanner(), **kw)
    theirs = run_stream(wfs, arr, AllGpu(), **kw)
    assert theirs.count("oom") > 0
    assert ours.count("oom") == 0 and ours.count("ok") == len(arr)


def test_holds_a_gpu_task_whose_vram_frees_soon_rather_than_a_slow_cpu_run():
    inv = _inv("S1")  # B: llama_1b, 447 ms GPU, 8.5 s CPU, 2484 MB
    p = LoadPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    short = view(_inv("S2").cards["D"], remaining=50.0)  # a reranker ending soon holds the VRAM
    live = fake_live(gpu=[short], budget=2600, vram=2600 - 100)
    assert p.place(inv, "B", live) is None
    assert p.place(inv, "B", fake_live(budget=2600)) is Mode.GPU_NOW  # free GPU: start now


def test_a_task_larger_than_the_budget_goes_to_the_cpu():
    inv = _inv("S1")
    p = LoadPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    assert p.place(inv, "B", fake_live(budget=2000)) is Mode.CPU


def test_learns_contention_across_invocations():
    wfs = [load_scenario(n) for n in ("S7", "S9")]  # clip presses hard in the default world
    p = LoadPlanner()
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
    p = LoadPlanner()
    p.start_stream([inv.workflow], random.Random(0))
    clip = _inv("S7").cards["B"]
    crowd = [view(clip)] * 6
    cpu = [view(inv.cards["C"], Mode.CPU)] * 4
    assert p.admit(inv, fake_live(gpu=crowd))  # CPU free
    assert not p.admit(inv, fake_live(gpu=crowd, cpu=cpu, slots=4, waiting=3, waiting_ms=900.0))
    assert LoadPlanner(admission=False).admit(inv, fake_live(gpu=crowd, cpu=cpu, slots=4, waiting=3))
