"""agent-plan as a policy: registered, never reads the testbed's contention, reaches the oracle."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.metrics import oracle_view, run_metrics
from agentsched.loop.runner import reference_oracle, run_loop
from agentsched.model.cards import CardSet
from agentsched.policies.base import PolicyContext
from agentsched.policies.registry import list_policies, make_policy
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed


def test_registered_warm_and_cold():
    assert {"agent-plan", "agent-plan-cold"} <= set(list_policies())
    assert make_policy("agent-plan").label == "agent-plan"
    assert make_policy("agent-plan-cold").label == "agent-plan-cold"
    assert make_policy("agent-plan", start="cold").label == "agent-plan-cold"


@pytest.mark.parametrize("kwargs, message", [
    ({"start": "hot"}, "start must be warm or cold"),
    ({"probe_fraction": 1.5}, "probe_fraction must be a number"),
    ({"probe_fraction": True}, "probe_fraction must be a number"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(PolicyError, match=message):
        make_policy("agent-plan", **kwargs)


def _with_contention(wf, factor: float):
    """The same workflow whose simulator contention is scaled (cards otherwise identical)."""
    cards = {}
    for n, c in wf.card_set.cards.items():
        s, p = c.contention()
        cards[n] = c.model_copy(update={"contention_sensitivity": s * factor, "contention_pressure": p * factor})
    return wf.with_cards(CardSet(name=f"x{factor}", cards=cards))


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_decisions_never_depend_on_the_simulated_contention(start):
    """Two worlds that differ only in contention give identical round-0 choices and inputs."""
    props = []
    for factor in (1.0, 3.0):
        wf = _with_contention(load_scenario("S13"), factor)

        def no_probe(_m):
            raise AssertionError("no execution: the planner decides round 0 from the prior")

        pol = make_policy("agent-plan", start=start, probe_fraction=0.0)
        pol.reset(PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe,
                                rounds=20, repeats=5))
        props.append(pol.propose(0))
    assert props[0].mapping == props[1].mapping
    assert props[0].info["predicted_e2e_ms"] == props[1].info["predicted_e2e_ms"]


@pytest.mark.parametrize("name", ["S5", "S13"])
@pytest.mark.parametrize("policy", ["agent-plan", "agent-plan-cold"])
def test_reaches_the_oracle_by_round_1(name, policy):
    wf = load_scenario(name)
    tb = SimTestbed(noise_sigma=0.03)
    view = oracle_view(wf, reference_oracle(wf, tb))
    run = run_loop(wf, make_policy(policy), tb, rounds=6, repeats=3, seed=0)
    m = run_metrics(run, view)
    assert m.first_equivalent_round is not None and m.first_equivalent_round <= 1
    assert view.equivalent(run.rounds[-1].mapping)
    info = run.records[-1].proposal_info
    assert info["reasoner"] == "plan" and "probe_budget" in info
