"""Per-mapping evidence: medians, noise intervals, failures, epochs, per-task change residuals."""

from __future__ import annotations

import math
import random

from agentsched.model.workflow import Mode
from agentsched.planner.evidence import DEFAULT_RUN_SD, Evidence

A = (Mode.CPU, Mode.GPU_NOW)
B = (Mode.GPU_NOW, Mode.GPU_NOW)


def test_best_is_the_lowest_risk_adjusted_median():
    ev = Evidence()
    for x in (100.0, 104.0, 98.0):
        ev.add(A, x)
    ev.add(B, 80.0)
    ev.add(B, None)  # 1 failure in 2 runs: its fast run costs its failure rate (over a prior of 4 runs)
    assert ev.best() == A and not ev.failed(B) and ev.measured(B) is not None
    assert ev.failure_rate(B) == 1 / 6 and ev.adjusted_ms(B) > ev.adjusted_ms(A)  # type: ignore[operator]
    assert ev.by_key[A].median_ms == 100.0
    ev.add(A, None)
    ev.add((Mode.CPU, Mode.CPU), None)  # only ever failed: barred
    assert ev.failed((Mode.CPU, Mode.CPU)) and ev.measured((Mode.CPU, Mode.CPU)) is None


def test_one_failure_in_77_runs_is_a_small_price_forty_percent_a_large_one():
    ev = Evidence()
    for _ in range(76):
        ev.add(A, 100.0)
    ev.add(A, None)
    for _ in range(6):
        ev.add(B, 90.0)
    for _ in range(4):
        ev.add(B, None)
    assert 1.0 < ev.adjusted_ms(A) / 100.0 < 1.05  # type: ignore[operator]
    assert ev.adjusted_ms(B) / 90.0 > 1.8  # type: ignore[operator]
    assert ev.best() == A


def test_noise_interval_narrows_with_runs_and_the_pooled_spread():
    ev = Evidence()
    rng = random.Random(0)
    for _ in range(3):
        ev.add(A, 100.0 * math.exp(rng.gauss(0, 0.05)))
    wide = ev.interval(A)
    for _ in range(30):
        ev.add(A, 100.0 * math.exp(rng.gauss(0, 0.05)))
    narrow = ev.interval(A)
    assert wide is not None and narrow is not None
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    assert 0.03 < ev.run_sd() < 0.08


def test_run_sd_defaults_until_repeats_are_seen():
    ev = Evidence()
    ev.add(A, 100.0)
    assert ev.run_sd() == DEFAULT_RUN_SD


def test_a_new_epoch_forgets_measurements_and_failures():
    ev = Evidence()
    ev.add(A, 100.0)
    ev.add(B, None)
    ev.new_epoch()
    assert ev.epoch == 1 and ev.best() is None and not ev.failed(B)
    assert ev.failed_total == 1


def test_task_residuals_show_a_contention_change_the_e2e_hides():
    ev = Evidence()
    rng = random.Random(1)
    for _ in range(6):
        ev.add(A, 100.0)
        ev.add_tasks(A, {"T": 50.0 * math.exp(rng.gauss(0, 0.02)), "U": 40.0 * math.exp(rng.gauss(0, 0.02))})
    same = ev.task_z(A, {"T": 50.0, "U": 40.0}, floor_sd=0.02)
    slower = ev.task_z(A, {"T": 65.0, "U": 52.0}, floor_sd=0.02)
    assert same is not None and abs(same) < 2
    assert slower is not None and slower > 5
    assert ev.task_z(B, {"T": 50.0}, floor_sd=0.02) is None  # never run: nothing to compare with


def test_a_mappings_runs_are_kept_up_to_a_bound():
    """Issue 22: a server's incumbent runs for days; its evidence keeps the most recent runs only."""
    from agentsched.model.workflow import Mode
    from agentsched.planner.evidence import RUNS_KEPT, Evidence

    ev = Evidence()
    key = (Mode.CPU,)
    for i in range(RUNS_KEPT + 100):
        ev.add(key, 100.0 + i)
        ev.add_tasks(key, {"A": 10.0 + i})
    kept = ev.by_key[key]
    assert kept.runs == RUNS_KEPT and len(kept.seen_at) == RUNS_KEPT and len(kept.task_logs["A"]) == RUNS_KEPT
    assert kept.e2e_ms[0] == 200.0 and kept.median_ms == 100.0 + 100 + (RUNS_KEPT - 1) / 2
