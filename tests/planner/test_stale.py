"""Stale evidence (issue 17, drift): a change the incumbent's own runs cannot show is still found, because
a measurement not re-run for a while may have changed since and its re-check competes for the probe budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentsched.errors import PolicyError
from agentsched.loop.metrics import oracle_view
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import reference_oracle, run_loop
from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Mode
from agentsched.planner import evidence as evm
from agentsched.planner.evidence import STALE_GAP, Evidence, changed_prob
from agentsched.testbeds.sim import SimTestbed

A, B = (Mode.CPU, Mode.GPU_NOW), (Mode.GPU_NOW, Mode.GPU_NOW)


def test_the_chance_of_a_change_grows_with_age():
    assert changed_prob(0) == 0.0
    assert 0 < changed_prob(10) < changed_prob(50) < changed_prob(200) < 1
    assert changed_prob(100) == pytest.approx(1 - math.exp(-evm.CHANGE_RATE * 100))


def test_a_measurement_goes_stale_and_its_draws_widen_with_age():
    ev = Evidence()
    for ms in (1000.0, 1010.0, 990.0):
        ev.add(A, ms)
    assert ev.stale_keys(None) == []  # just measured
    ev.add(B, 900.0)
    for _ in range(STALE_GAP):
        ev.add(B, 900.0)
    assert ev.age(A) == STALE_GAP + 1
    assert ev.stale_keys(B) == [A] and ev.stale_keys(A) == []
    rng = np.random.default_rng(0)
    young = np.log(ev.stale_draws(A, rng, 4000))
    for _ in range(200):
        ev.add(B, 900.0)
    old = np.log(ev.stale_draws(A, rng, 4000))
    assert np.median(old) == pytest.approx(math.log(1000.0), abs=0.02)  # centred on what it measured
    assert np.std(old) > 2 * np.std(young)  # but far less sure of it now
    # a prediction pulls a mapping run once towards it; a well-measured one barely moves
    once = (Mode.GPU_NOW, Mode.CPU)
    ev.add(once, 1500.0)
    sd = ev.run_sd()
    pulled = np.median(ev.stale_draws(once, rng, 4000, predicted=(1000.0, sd)))  # as sure as one run
    kept = np.median(ev.stale_draws(A, rng, 4000, predicted=(1500.0, sd)))  # three runs outweigh it
    assert pulled == pytest.approx(math.sqrt(1000.0 * 1500.0), rel=0.01)
    assert kept == pytest.approx(1000.0 * 1.5**0.25, rel=0.01)
    with pytest.raises(PolicyError):
        ev.stale_draws((Mode.CPU, Mode.CPU), rng, 10)


def test_a_disagreeing_rerun_after_a_gap_supersedes_the_old_runs():
    ev = Evidence()
    for ms in (1000.0, 1005.0, 995.0):
        ev.add(A, ms)
    ev.add(A, 1400.0)  # no gap: an outlier joins the runs
    assert ev.by_key[A].runs == 4
    for _ in range(STALE_GAP):
        ev.add(B, 900.0)
    ev.add(A, 700.0)  # after a gap, far outside the old interval: the conditions changed
    assert list(ev.by_key[A].e2e_ms) == [700.0] and ev.superseded == 1
    for _ in range(STALE_GAP):
        ev.add(B, 900.0)
    ev.add(A, 705.0)  # after a gap but agreeing: kept beside the old run
    assert ev.by_key[A].runs == 2 and ev.superseded == 1


def test_units_seen_on_the_gpu_may_have_changed_since():
    ev = Evidence()
    ev.saw_gpu(["u"])
    ev.add(A, 1.0)
    for _ in range(50):
        ev.add(A, 1.0)
    assert ev.units_changed() == {"u": pytest.approx(changed_prob(50))}  # never-seen units keep their prior


# A drift run (the benchmark's drift section, pair 5): the world switches at round 10 from a perturbed
# world to the default one; the new best runs task C on the GPU, which the incumbent keeps on the CPU, so
# the incumbent's timings do not move and no change test fires. Its one measurement (round 0, the old
# world: far worse) goes stale; the re-check finds the new best.
WF = dict(tasks=6, topology="random", space="three_way", budget_tightness=0.0, seed=3263)
SWITCH = 10


def _drift_run():
    wf = generate_workflow(**WF)
    old, new = "perturbed:563", "a5500"
    view_new = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=new)))
    view_old = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=old)))
    assert not view_new.equivalent(view_old.best)  # the best mapping changes with the world
    tb = SimTestbed(noise_sigma=0.03, world=f"drift:{old},{new},{SWITCH}")
    run = run_loop(wf, make_policy("agent-plan"), tb, rounds=20, repeats=5, seed=5)
    first = next((r.round for r in run.rounds[SWITCH:] if view_new.equivalent(r.mapping)), None)
    detected = any("change" in (rec.evidence or {}) or "change" in rec.proposal_info for rec in run.records)
    return run, first, detected


def test_an_invisible_change_is_found_by_re_checking_stale_evidence():
    run, first, detected = _drift_run()
    assert not detected  # invisible to the incumbent: no change test fired
    assert first is not None and first - SWITCH < 10, f"new best first run at round {first}"
    notes = [n for rec in run.records[SWITCH:] for n in rec.proposal_info.get("notes", [])]
    assert any("re-checking a stale measurement" in n for n in notes)


def test_without_staleness_the_invisible_change_is_missed(monkeypatch):
    monkeypatch.setattr(evm, "CHANGE_RATE", 0.0)  # measurements never go stale: the planner before the fix
    _, first, detected = _drift_run()
    assert not detected and first is None
