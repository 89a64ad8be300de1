"""agent-plan as a policy: registered, never reads the testbed's contention, reaches the oracle."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.metrics import oracle_view, run_metrics
from agentsched.loop.registry import list_policies, make_policy
from agentsched.loop.runner import reference_oracle, run_loop
from agentsched.policies.base import PolicyContext
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed


def test_registered_warm_and_cold():
    assert {"agent-plan", "agent-plan-cold"} <= set(list_policies())
    assert make_policy("agent-plan").label == "agent-plan"
    assert make_policy("agent-plan-cold").label == "agent-plan-cold"
    assert make_policy("agent-plan", start="cold").label == "agent-plan-cold"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"start": "hot"}, "start must be warm or cold"),
        ({"probe_fraction": 1.5}, "probe_fraction must be a number"),
        ({"probe_fraction": True}, "probe_fraction must be a number"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(PolicyError, match=message):
        make_policy("agent-plan", **kwargs)


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_decisions_never_depend_on_the_simulated_contention(start):
    """Two worlds (a5500, perturbed:3) give identical round-0 choices and inputs: the world is reachable
    from the testbed only, and the planner's inputs (workflow, cards) do not change with it."""
    props = []
    for world in ("a5500", "perturbed:3"):
        wf = load_scenario("S13")
        assert SimTestbed(world=world).world.name == world

        def no_probe(_m):
            raise AssertionError("no execution: the planner decides round 0 from the prior")

        pol = make_policy("agent-plan", start=start, probe_fraction=0.0)
        pol.reset(
            PolicyContext(
                workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe, rounds=20, repeats=5
            )
        )
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


def test_the_planner_source_never_touches_the_world():
    """No module of the planner imports the world or reads contention from a card."""
    import pathlib

    import agentsched.planner as plan

    for f in pathlib.Path(plan.__file__).parent.glob("*.py"):
        text = f.read_text()
        for banned in (
            "testbeds.world",
            ".contention(",
            "contention_sensitivity",
            "contention_pressure",
            "load_world",
            ".world",
        ):
            assert banned not in text, (f.name, banned)


def test_learns_different_models_under_different_worlds():
    """Same inputs, different worlds: what the planner learns differs (it reads the executions)."""
    wf = load_scenario("S5")
    fits = []
    for world in ("a5500", "perturbed:3"):
        pol = make_policy("agent-plan")
        run_loop(wf, pol, SimTestbed(noise_sigma=0.03, world=world), rounds=3, repeats=3, seed=0)
        fits.append(pol.model.fit().theta)
    assert any(abs(a - b) > 0.05 for a, b in zip(*fits, strict=True))


def test_endless_run_probes_within_a_per_round_allowance():
    """rounds=None (a runtime): no last round, and the probe budget is probe_fraction x repeats per
    round elapsed, so probes never run ahead of the rounds they are a share of."""
    wf = load_scenario("S13")
    tb = SimTestbed(noise_sigma=0.03)

    class Stop(Exception):
        pass

    budgets: list[tuple[int, int, int]] = []  # (round, allowed, used)

    def on_round(rec):
        b = rec.proposal_info["probe_budget"]
        budgets.append((rec.result.round, b["allowed"], b["used"]))
        if rec.result.round == 3:
            raise Stop

    with pytest.raises(Stop):
        run_loop(
            wf, make_policy("agent-plan", probe_fraction=0.4), tb, rounds=None, repeats=5, seed=0, on_round=on_round
        )
    assert [(r, a) for r, a, _ in budgets] == [(0, 2), (1, 4), (2, 6), (3, 8)]  # 0.4 x 5 per round
    assert all(used <= allowed for _, allowed, used in budgets)


def _wide(n_tasks: int):
    from agentsched.model.workflow import Workflow

    return Workflow(name=f"wide{n_tasks}", tasks={f"T{i}": "clip" for i in range(n_tasks)})


@pytest.mark.parametrize("policy", ["agent-plan", "agent-plan-cold"])
def test_a_workflow_over_the_planner_cap_is_refused_in_one_line_before_any_run(policy):
    from agentsched.planner.search import MAX_PLAN_TASKS

    pol = make_policy(policy)
    pol.preflight(_wide(MAX_PLAN_TASKS))  # at the cap: taken on
    big = _wide(MAX_PLAN_TASKS + 1)
    n = MAX_PLAN_TASKS + 1
    want = f"{policy} plans at most {MAX_PLAN_TASKS:,} tasks (wide{n} has {n:,}); use agent-rules"
    with pytest.raises(PolicyError) as e:
        pol.preflight(big)
    assert str(e.value) == want

    class Counting(SimTestbed):
        runs = 0

        def run(self, *a, **k):
            Counting.runs += 1
            return super().run(*a, **k)

    with pytest.raises(PolicyError, match="plans at most"):  # run_loop without a preflight: refused in reset
        run_loop(big, make_policy(policy), Counting(), rounds=1, repeats=1)
    assert Counting.runs == 0


def test_a_run_failed_in_host_code_is_no_evidence_against_its_mapping():
    from agentsched.model.execution import Execution, Status

    wf = load_scenario("S5")
    pol = make_policy("agent-plan", probe_fraction=0.0)
    pol.reset(
        PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=None, rounds=20, repeats=5)
    )
    mapping = pol.propose(0).mapping
    key = pol.key(mapping)

    def failed(**extra):
        return Execution(
            status=Status.ERROR,
            mapping=dict(mapping),
            e2e_ms=None,
            elapsed_ms=3.0,
            peak_vram_mb=0.0,
            spans=(),
            message="it raised",
            extra=extra,
        )

    pol.record(failed(failed_node="llm"))  # host code around the tasks: says nothing of the mapping
    assert key not in pol.evidence.by_key or pol.evidence.by_key[key].failures == 0
    pol.record(failed(failed_task="A"))  # a placed task raised: counted against it
    assert pol.evidence.by_key[key].failures == 1


def test_a_round_with_nothing_to_judge_is_no_evidence_and_feeds_no_model():
    """Every run of the round failed in host code (an LLM endpoint down): the same runs fail under
    any mapping, so the planner neither marks the mapping failed nor fits its model to them."""
    from agentsched.loop.runner import summarize_runs
    from tests.support.host_down import host_failed

    wf = load_scenario("S5")
    tb = SimTestbed(noise_sigma=0.0)
    pol = make_policy("agent-plan", probe_fraction=0.0)
    pol.reset(
        PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=None, rounds=20, repeats=2)
    )
    mapping = pol.propose(0).mapping
    key = pol.key(mapping)

    def fed() -> int:  # host and GPU runs the model holds
        m = pol.model
        return sum(len(v) for logs in (m.cpu_logs, m.load_logs, m.gpu_runs) for v in logs.values())

    host = [host_failed(tb.run(wf, mapping)) for _ in range(2)]
    assert all(x.spans for x in host)  # the tools ran: there would be timings to learn
    pol.observe(summarize_runs(wf, mapping, host, 0, 2))
    assert key not in pol.infeasible and key not in pol.evidence.by_key and fed() == 0 and not pol.seen_modes
    assert pol.propose(1).mapping == mapping  # still a candidate: nothing was held against it
    pol.observe(summarize_runs(wf, mapping, [*host, tb.run(wf, mapping)], 1, 5))  # one run ended: judged
    assert key not in pol.infeasible and pol.evidence.by_key[key].runs == 1 and fed() > 0
