"""Exact timelines for tiny hand-computable cases (noise-free simulator)."""

import pytest

from agentsched import Mode, SimTestbed, Status, Workflow

C, N, Q = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


def wf(cards, tasks, edges=(), budget=None, space="three_way"):
    w = Workflow(
        name="t",
        decision_space=space,
        vram_budget_mb=budget,
        tasks={k: {"tool": v} for k, v in tasks.items()},
        edges=[list(e) for e in edges],
    )
    return w.with_cards(cards)


def timeline(ex):
    return {s.task: (round(s.start_ms, 6), round(s.end_ms, 6)) for s in ex.spans}


def test_serial_chain(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "y", "C": "z"}, [("A", "B"), ("B", "C")])
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": C, "B": N, "C": C})
    assert ex.status is Status.OK
    assert timeline(ex) == {"A": (0, 100), "B": (100, 120), "C": (120, 160)}
    assert ex.e2e_ms == pytest.approx(160)
    assert ex.peak_vram_mb == 300
    assert ex.span("B").ready_ms == 100


def test_two_concurrent_gpu_tasks_slow_each_other(tiny_cards, tiny_world):
    # rate_x = 1/(1+1*1) = 0.5 -> x ends at 20; y ran 20 ms at 2/3 -> 13.33 done, 6.67 left alone
    w = wf(tiny_cards, {"A": "x", "B": "y"})
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": N, "B": N})
    tl = timeline(ex)
    assert tl["A"] == (0, 20)
    assert tl["B"][1] == pytest.approx(20 + 20 / 3, abs=1e-6)
    assert ex.e2e_ms == pytest.approx(26.666667, abs=1e-5)
    assert ex.peak_vram_mb == 700


def test_cpu_and_neutral_tasks_do_not_contend(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "y", "C": "z"})
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": N, "B": C, "C": N})  # z has no GPU: host code
    assert timeline(ex) == {"A": (0, 10), "B": (0, 200), "C": (0, 40)}
    assert ex.span("C").vram_mb == 0


def test_queued_task_waits_for_vram_then_loads(tiny_cards, tiny_world):
    # budget 500: x (400 MB) runs first; y (300 MB) admitted at 10, loads 30, runs 20
    w = wf(tiny_cards, {"A": "x", "B": "y"}, budget=500)
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": N, "B": Q})
    assert ex.status is Status.OK
    assert timeline(ex) == {"A": (0, 10), "B": (10, 60)}
    b = ex.span("B")
    assert (b.ready_ms, b.load_ms, b.run_ms) == (0, 30, 20)
    assert ex.peak_vram_mb == 400
    assert ex.vram_timeline == ((0.0, 400.0), (10.0, 300.0), (60.0, 0.0))


def test_queue_runs_one_task_at_a_time(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "y"})
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": Q, "B": Q})
    # FIFO in file order: A loads 50, runs 10 -> 60; then B loads 30, runs 20 -> 110
    assert timeline(ex) == {"A": (0, 60), "B": (60, 110)}


def test_gpu_now_over_budget_is_oom(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "y"}, budget=500)
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": N, "B": N})
    assert ex.status is Status.OOM
    assert ex.e2e_ms is None
    assert ex.elapsed_ms == 0
    assert ex.peak_vram_mb == 700
    assert "gpu_now task B" in ex.message and "500" in ex.message
    assert ex.to_dict()["e2e_ms"] is None


def test_oom_later_in_the_dag_costs_the_time_spent(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "z", "B": "x", "C": "y"}, [("A", "C")], budget=500)
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": C, "B": Q, "C": N})
    # B admitted at 0 (load 50 holds 400 MB); C ready at 40 needs 300 more -> oom at 40
    assert ex.status is Status.OOM
    assert ex.elapsed_ms == pytest.approx(40)
    assert ex.extra["failed_task"] == "C"


def test_queued_task_larger_than_budget_is_oom(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "y"}, budget=350)
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": Q, "B": C})
    assert ex.status is Status.OOM
    assert "more than the whole budget" in ex.message


def test_noise_is_seeded_and_multiplicative(tiny_cards, tiny_world):
    import random

    w = wf(tiny_cards, {"A": "x"})
    tb = SimTestbed(world=tiny_world, noise_sigma=0.05)
    a = [tb.run(w, {"A": C}, rng=random.Random(7)).e2e_ms for _ in range(2)]
    b = tb.run(w, {"A": C}, rng=random.Random(8)).e2e_ms
    assert a[0] == a[1] != b
    assert 80 < b < 125
    assert tb.expected(w, {"A": C}).e2e_ms == 100


def test_cpu_slots_cap_parallel_cpu_tasks(tiny_cards, tiny_world):
    w = wf(tiny_cards, {"A": "x", "B": "z"})
    ex = SimTestbed(world=tiny_world, noise_sigma=0, cpu_slots=1).run(w, {"A": C, "B": C})
    assert timeline(ex) == {"A": (0, 100), "B": (100, 140)}


def test_host_only_tool_on_a_gpu_mode_is_a_cpu_task(tiny_cards, tiny_world):
    # z has no GPU implementation: on gpu_queue it must not hold the queue, and it takes a CPU slot
    w = wf(tiny_cards, {"A": "z", "B": "x"})
    ex = SimTestbed(world=tiny_world, noise_sigma=0).run(w, {"A": Q, "B": Q})
    assert timeline(ex) == {"A": (0, 40), "B": (0, 60)}
    assert ex.span("A").mode is Q and ex.span("A").load_ms == 0 and ex.span("A").vram_mb == 0
    capped = SimTestbed(world=tiny_world, noise_sigma=0, cpu_slots=1)
    assert capped.run(w, {"A": N, "B": C}).e2e_ms == capped.run(w, {"A": C, "B": C}).e2e_ms == 140
