"""Shared helpers of the baselines: VRAM guard, certain infeasibility, lower bound, CPU cores."""

from __future__ import annotations

from agentsched.model import Mode
from agentsched.policies._common import CpuCores, VramGuard, certainly_infeasible, lower_bound_ms

G, C, Q = Mode.GPU_NOW, Mode.CPU, Mode.GPU_QUEUE


def test_guard_sums_tasks_that_may_run_together(make_workflow):
    wf = make_workflow(
        {"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 300}, "c": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 500}},
        {"A": "a", "B": "a", "C": "c"},
        budget=700,
    )
    g = VramGuard(wf, wf.task_cards)
    assert g.fits("A")
    g.admit("A")
    assert g.fits("B")  # 300 + 300 <= 700
    g.admit("B")
    assert not g.fits("C")  # 500 + 600 > 700


def test_guard_ignores_tasks_ordered_by_a_path(make_workflow):
    # A -> B: they never run together, so 600 + 600 under a 700 budget is fine
    wf = make_workflow(
        {"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 600}}, {"A": "a", "B": "a"}, edges=[("A", "B")], budget=700
    )
    g = VramGuard(wf, wf.task_cards)
    g.admit("A")
    assert g.fits("B")


def test_guard_counts_exactly_the_admitted_tasks_that_may_overlap(make_workflow):
    # A -> B -> C, and D apart: D may run beside each of A, B, C; C beside D only
    wf = make_workflow(
        {"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 400}},
        {"A": "a", "B": "a", "C": "a", "D": "a"},
        edges=[("A", "B"), ("B", "C")],
        budget=800,
    )
    g = VramGuard(wf, wf.task_cards)
    g.admit("A")
    g.admit("A")  # admitted once however often it is said: D fits beside A's 400 alone
    assert g.fits("D")
    g.admit("B")
    assert g.fits("C")  # its ancestors never run beside it
    assert not g.fits("D")  # A and B may each run beside D: the guard counts both (400 + 400 + 400 > 800)


def test_guard_without_budget_admits_everything(make_workflow):
    wf = make_workflow({"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 10**6}}, {"A": "a", "B": "a"})
    g = VramGuard(wf, wf.task_cards)
    g.admit("A")
    assert g.fits("B")


def test_certainly_infeasible_cases(make_workflow):
    wf = make_workflow(
        {"a": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 600}, "big": {"cpu_ms": 10, "gpu_ms": 1, "vram_mb": 1200}},
        {"A": "a", "B": "a", "X": "big"},
        space="three_way",
        budget=1000,
    )
    cards = wf.task_cards
    assert certainly_infeasible(wf, cards, {"A": G, "B": G, "X": C})  # 1200 at t=0
    assert not certainly_infeasible(wf, cards, {"A": G, "B": Q, "X": C})  # the queue head waits
    assert certainly_infeasible(wf, cards, {"A": C, "B": C, "X": Q})  # larger than the whole budget


def test_lower_bound_is_the_critical_path_of_the_faster_devices(make_workflow):
    wf = make_workflow(
        {"a": {"cpu_ms": 100, "gpu_ms": 10}, "b": {"cpu_ms": 20, "gpu_ms": 50}, "n": {"cpu_ms": 7}},
        {"A": "a", "B": "b", "C": "n", "D": "a"},
        edges=[("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
    )
    assert lower_bound_ms(wf, wf.task_cards) == 10 + 20 + 10


def test_cpu_cores_insert_into_gaps():
    cores = CpuCores(1)
    cores.book(0, 0.0, 10.0)
    cores.book(0, 20.0, 30.0)
    assert cores.earliest(0.0, 5.0) == (10.0, 0)  # fits the 10..20 gap
    assert cores.earliest(0.0, 15.0) == (30.0, 0)  # too long for the gap
    two = CpuCores(2)
    two.book(0, 0.0, 10.0)
    assert two.earliest(0.0, 5.0) == (0.0, 1)  # the idle core
