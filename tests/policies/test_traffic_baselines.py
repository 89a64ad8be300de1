"""Baselines under load: what each decides from a given live state (never the world)."""

from __future__ import annotations

import random

from agentsched.model.live import Invocation, TaskDone
from agentsched.model.workflow import Mode
from agentsched.policies.traffic.baselines import AllGpu, Dmda, HeftStream, LeastLoaded, WithAdmission, cpu_wait_ms
from agentsched.scenarios import load_scenario
from tests.support.live import fake_live, view


def inv_of(name):
    wf = load_scenario(name)
    return Invocation(0, 0, wf, 0.0, wf.task_cards)


def test_all_gpu_places_every_gpu_tool_on_the_gpu():
    inv = inv_of("S1")
    plan = AllGpu().plan(inv, fake_live())
    assert plan == {"A": Mode.GPU_NOW, "B": Mode.GPU_NOW, "C": Mode.GPU_NOW, "D": Mode.CPU}


def test_heft_per_invocation_is_heft_on_the_cards():
    inv = inv_of("S10")
    plan = HeftStream().plan(inv, fake_live())
    assert plan["B"] is Mode.GPU_NOW  # bert x12: 156 ms GPU vs 10.7 s CPU


def test_cpu_wait_is_the_backlog_over_the_slots():
    card = inv_of("S5").cards["A"]
    assert cpu_wait_ms(fake_live(cpu=[view(card, Mode.CPU, 400.0)], slots=4)) == 0.0
    busy = [view(card, Mode.CPU, 400.0)] * 4
    assert cpu_wait_ms(fake_live(cpu=busy, slots=4, waiting=2, waiting_ms=800.0)) == (1600.0 + 800.0) / 4


def test_dmda_goes_to_the_cpu_when_the_gpu_worker_is_busy_or_vram_is_full():
    inv = inv_of("S2")  # D: reranker 8 ms GPU, 440 ms CPU
    d = Dmda()
    d.start_stream([inv.workflow], random.Random(0))
    assert d.place(inv, "D", fake_live()) is Mode.GPU_NOW
    long = view(inv_of("S1").cards["B"], remaining=1000.0)  # llama_1b for another second
    assert d.place(inv, "D", fake_live(gpu=[long])) is Mode.CPU
    assert d.place(inv, "D", fake_live(budget=1000, vram=900)) is Mode.CPU  # 170 MB does not fit


def test_dmda_learns_per_tool_means():
    inv = inv_of("S2")
    d = Dmda()
    d.start_stream([inv.workflow], random.Random(0))
    card = inv.cards["D"]
    d.observe(TaskDone("S2", "D", card, Mode.GPU_NOW, 900.0, 0.0, 0.0, {}))
    assert d.mean_ms(card, "gpu") == 900.0
    assert d.place(inv, "D", fake_live()) is Mode.CPU  # 900 ms GPU now, 440 ms CPU


def test_least_loaded_compares_device_loads():
    inv = inv_of("S2")
    ll = LeastLoaded()
    card = inv.cards["D"]
    assert ll.place(inv, "D", fake_live()) is Mode.GPU_NOW
    crowded = [view(card)] * 4  # GPU load 1.0 vs CPU 0
    assert ll.place(inv, "D", fake_live(gpu=crowded)) is Mode.CPU


def test_admission_waits_on_a_backlog():
    inv = inv_of("S2")
    d = WithAdmission(AllGpu())
    assert d.name == "all-gpu+adm"
    assert d.admit(inv, fake_live())
    assert not d.admit(inv, fake_live(waiting=1))
    assert not d.admit(inv, fake_live(queue=1))
    assert not d.admit(inv, fake_live(budget=1000, vram=900))
