"""Probing by value: expected and optimistic gains, the stop rule, and the planner's probe budget."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import run_loop
from agentsched.planner.probe import candidate_values, worth_probing
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed


def test_gains_are_relative_to_the_incumbent_per_draw():
    [v] = candidate_values([100.0, 100.0, 100.0, 100.0], [[90.0, 110.0, 100.0, 80.0]])
    assert v.expected_gain == pytest.approx((0.1 + 0.0 + 0.0 + 0.2) / 4)
    assert v.mean_gain == pytest.approx((0.1 - 0.1 + 0.0 + 0.2) / 4)
    assert v.optimistic_gain > 0.1


def test_infeasible_draws_gain_nothing():
    [v] = candidate_values([100.0, 100.0], [[None, None]])
    assert v.expected_gain == 0.0 and not worth_probing(v, 0.01)


def test_probing_stops_when_no_optimistic_gain_beats_the_threshold():
    values = candidate_values([100.0] * 5, [[100.5] * 5, [99.6] * 5])
    assert not any(worth_probing(v, 0.01) for v in values)
    assert worth_probing(candidate_values([100.0] * 5, [[95.0] * 5])[0], 0.01)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5])
def test_bad_quantile(bad):
    with pytest.raises(PolicyError, match="quantile"):
        candidate_values([1.0], [[1.0]], quantile=bad)


def test_mismatched_draws_and_empty_draws():
    with pytest.raises(PolicyError, match="draws"):
        candidate_values([1.0, 2.0], [[1.0]])
    with pytest.raises(PolicyError, match="at least one"):
        candidate_values([], [])


def test_the_planner_stops_probing_and_states_its_budget():
    wf = load_scenario("S12")
    run = run_loop(wf, make_policy("agent-plan"), SimTestbed(noise_sigma=0.03), rounds=20, repeats=5, seed=0)
    budget = run.records[0].proposal_info["probe_budget"]
    assert budget["fraction"] == 0.1 and budget["allowed"] == 10
    for rec in run.records:
        assert rec.proposal_info["probe_budget"]["used"] <= budget["allowed"]
    assert run.probes_total <= budget["allowed"]
    # once the model is sure, new candidates are no longer worth a run; what remains is re-checking
    # measurements gone stale (the machine may have changed since), within the same budget
    later = [n for r in run.records[6:] for n in r.proposal_info["notes"]]
    assert all("re-checking a stale measurement" in n for n in later)


def test_zero_probe_fraction_never_probes():
    run = run_loop(
        load_scenario("S5"),
        make_policy("agent-plan", probe_fraction=0.0),
        SimTestbed(noise_sigma=0.03),
        rounds=6,
        repeats=2,
        seed=0,
    )
    assert run.probes_total == 0
