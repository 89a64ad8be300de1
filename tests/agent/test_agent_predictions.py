"""The optional fifth evidence stream: the planner's model predictions in the agent's view and prompt.

Off by default (the four-stream prompt is unchanged, byte for byte); when on, the top candidates are
feasible under the budget, sorted by predicted E2E, carry a range, and are fed by every execution
the agent sees; the rules reasoner ignores them; agent-llm shows them in every prompt it sends.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from agentsched.agent.forecast import TOP_K
from agentsched.agent.local_llm import completion
from agentsched.agent.policy import AgentPolicy
from agentsched.agent.prompt import build_prompt, load_template
from agentsched.agent.rules import RulesReasoner
from agentsched.errors import PolicyError
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import run_loop
from agentsched.model.mapping import format_mapping
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed
from tests.support.views import round0_view

HEADER = "Model predictions"


def _after(scenario: str, rounds: int, *, start: str = "warm", predictions: bool = True, seed: int = 0):
    wf = load_scenario(scenario)
    policy = AgentPolicy("rules", start=start, predictions=predictions)
    run = run_loop(wf, policy, SimTestbed(), rounds=rounds, repeats=3, seed=seed)
    return wf, policy, run


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_off_by_default_no_field_and_no_block(start):
    wf, policy, _ = _after("S5", 2, start=start, predictions=False)
    view = policy.view(2)
    assert view.predictions is None
    prompt = build_prompt(view)
    assert HEADER not in prompt.text()
    assert prompt.system == load_template("system")
    assert "## 5. Guidance" in prompt.user and "## 6. Answer" in prompt.user
    assert "predictions" not in policy.describe() and "predictions" not in policy.label


@pytest.mark.parametrize("scenario", ["S5", "S13"])
def test_on_the_block_follows_the_monitor_and_frames_predictions(scenario):
    wf, policy, _ = _after(scenario, 2)
    prompt = build_prompt(policy.view(2))
    user = prompt.user
    i4, i5, i6, i7 = (
        user.index(h) for h in ("## 4. Runtime monitor", f"## 5. {HEADER}", "## 6. Guidance", "## 7. Answer")
    )
    assert i4 < i5 < i6 < i7
    block = user[i5:i6]
    assert "not measurements and not instructions" in block and "never tells you what to choose" in block
    assert re.search(r"Model fitted to \d+ executions", block)
    assert "| P1 |" in block and "predicted E2E ms" in block and "range ms" in block
    assert load_template("system_predictions") in prompt.system and prompt.system.startswith(load_template("system"))
    assert policy.label == "agent-rules[predictions]" and policy.describe()["predictions"] is True


@pytest.mark.parametrize("scenario", ["S5", "S13", "S1", "S9"])
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_candidates_are_feasible_sorted_and_ranged(scenario, start):
    wf, policy, run = _after(scenario, 3, start=start)
    pr = policy.view(3).predictions
    assert pr is not None and pr.candidates
    # every execution the agent saw fed the model: the rounds' runs and the monitor's probes
    assert pr.executions == run.executions_total == len(run.all_executions())
    e2e = [c.e2e_ms for c in pr.candidates]
    assert e2e == sorted(e2e) and len(pr.candidates) <= TOP_K
    assert len({format_mapping(wf, c.mapping) for c in pr.candidates}) == len(pr.candidates)
    budget = wf.vram_budget_mb
    exact = SimTestbed(noise_sigma=0.0)
    for c in pr.candidates:
        assert c.e2e_low_ms <= c.e2e_ms <= c.e2e_high_ms
        assert budget is None or c.peak_vram_mb <= budget
        assert exact.run(wf, c.mapping).ok, format_mapping(wf, c.mapping)  # feasible on the testbed too
        seen = policy.view(3).measured_for(c.mapping)
        assert seen is None or seen.mean_e2e_ms is not None  # never a mapping already seen failing


def test_warm_round0_predicts_from_the_cards_cold_round0_says_it_cannot():
    warm = _after("S5", 1)[1]
    warm.reset(warm.ctx)
    pr = warm.view(0).predictions
    assert pr is not None and pr.executions == 0 and pr.candidates
    assert "has seen no execution yet: its figures are the cards" in build_prompt(warm.view(0)).user
    cold = _after("S5", 1, start="cold")[1]
    cold.reset(cold.ctx)
    pr = cold.view(0).predictions
    assert pr is not None and pr.candidates == () and "cold start" in pr.note
    user = build_prompt(cold.view(0)).user
    assert "No predictions this round: cold start" in user and "| P1 |" not in user


def test_the_prompt_with_the_option_off_is_the_golden_prompt_and_on_adds_only_the_block():
    wf = load_scenario("S5")
    off = build_prompt(round0_view(wf, "warm"))
    policy = AgentPolicy("rules", predictions=True)
    policy.reset(_ctx(wf))
    on = build_prompt(policy.view(0))
    start, end = on.user.index(f"## 5. {HEADER}"), on.user.index("## 6. Guidance")
    stripped = (
        (on.user[:start] + on.user[end:])
        .replace("## 6. Guidance", "## 5. Guidance")
        .replace("## 7. Answer", "## 6. Answer")
    )
    assert stripped == off.user
    assert on.system == off.system + "\n\n" + load_template("system_predictions")


def _ctx(wf):
    import random

    from agentsched.policies.base import PolicyContext

    def no_probe(_m):
        raise AssertionError("round 0 needs no probe")

    return PolicyContext(
        workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe, rounds=20, repeats=1
    )


@pytest.mark.parametrize("scenario", ["S5", "S13", "S10"])
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_the_rules_reasoner_ignores_the_stream(scenario, start):
    runs = [_after(scenario, 6, start=start, predictions=p, seed=1)[2] for p in (False, True)]
    for a, b in zip(*(r.records for r in runs), strict=True):
        assert a.result.mapping == b.result.mapping
        assert [p.mapping for p in a.probes] == [p.mapping for p in b.probes]
        assert a.proposal_info["reason"] == b.proposal_info["reason"]
    assert "predictions" in runs[1].records[-1].proposal_info  # the stream was there to ignore
    # and on one view: the same decision with the stream removed
    _, policy, _ = _after(scenario, 3, start=start)
    view = policy.view(3)
    assert view.predictions is not None
    rules = RulesReasoner()
    assert rules.propose(view) == rules.propose(replace(view, predictions=None))


def test_the_option_is_validated():
    with pytest.raises(PolicyError, match="agent predictions must be true or false, got 'yes'"):
        AgentPolicy("rules", predictions="yes")
    with pytest.raises(PolicyError, match="predictions"):
        make_policy("agent-rules", predictions=True)  # the CLI offers it for agent-llm only
    assert (
        make_policy("agent-llm", predictions=True, llm={"base_url": "http://127.0.0.1:9/v1", "model": "m"}).predictions
        is True
    )


def _answer_p1(body, script):
    """An LLM stand-in that reads the predictions table and answers its first row (else all on the CPU)."""
    user = body["messages"][-1]["content"]
    m = re.search(r"^\| P1 \| (\S+) \|", user, re.M)
    pairs = dict(p.split("=") for p in m.group(1).split(",")) if m else {t: "cpu" for t in "ABCD"}
    return 200, completion(json.dumps({"mapping": pairs, "reason": "the lowest predicted E2E"}), "scripted")


def test_agent_llm_with_predictions_sends_and_audits_the_block(serve):
    server, script = serve(_answer_p1)
    wf = load_scenario("S5")
    policy = AgentPolicy(
        "llm", predictions=True, llm={"base_url": server.base_url, "model": "scripted", "timeout_s": 10.0}
    )
    run = run_loop(wf, policy, SimTestbed(), rounds=3, repeats=3, seed=0)
    assert len(run.records) == 3 and script.calls == 3
    assert policy.label == "agent-llm:scripted[predictions]"
    for rec, body in zip(run.records, server.requests, strict=True):
        info = rec.proposal_info
        assert info["fallback"] is None  # the model's answer was used every round
        assert f"## 5. {HEADER}" in info["prompt"] and "| P1 |" in info["prompt"]
        assert body["messages"][-1]["content"] in info["prompt"]  # the audit holds what was sent
        p1 = info["predictions"][0]["mapping"]
        assert f"| P1 | {p1} |" in info["prompt"]
        assert format_mapping(wf, rec.result.mapping) == p1  # the stand-in followed the table's first row


@pytest.mark.parametrize("flag", ["--llm-predictions", "--no-llm-predictions"])
def test_run_command_switches_the_stream(flag, serve, cli, tmp_path):
    server, _ = serve(_answer_p1)
    f = tmp_path / "run.json"
    code, out, err = cli(
        "run",
        "S5",
        "--policy",
        "agent-llm",
        "--llm-base-url",
        server.base_url,
        "--llm-model",
        "scripted",
        flag,
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--no-oracle",
        "--json-out",
        str(f),
    )
    assert code == 0, err
    doc = json.loads(f.read_text())
    on = flag == "--llm-predictions"
    assert doc["policy_info"].get("predictions", False) is on
    assert all((f"## 5. {HEADER}" in r["prompt"]) is on for r in doc["rounds"])
    # every request the server got (the preflight aside) carried the block only when on
    asked = [b["messages"][-1]["content"] for b in server.requests if len(b.get("messages", [])) > 1]
    assert len(asked) == 2 and all((HEADER in u) is on for u in asked)


def test_predictions_refuse_a_workflow_over_the_planner_cap():
    from agentsched.model.workflow import Workflow
    from agentsched.planner.search import MAX_PLAN_TASKS

    big = Workflow(name="wide", tasks={f"T{i}": "clip" for i in range(MAX_PLAN_TASKS + 1)})
    with pytest.raises(PolicyError, match=r"model-prediction stream .* plans at most .*; turn predictions off"):
        AgentPolicy("rules", predictions=True).preflight(big)
    with pytest.raises(PolicyError, match="turn predictions off"):  # also without a preflight
        run_loop(big, AgentPolicy("rules", predictions=True), SimTestbed(), rounds=1, repeats=1)
    AgentPolicy("rules").preflight(big)  # without predictions: no cap


def test_a_round_with_nothing_to_judge_does_not_feed_the_model():
    from tests.support.host_down import HostDown

    wf = load_scenario("S5")
    policy = AgentPolicy("rules", predictions=True)
    tb = HostDown(SimTestbed(noise_sigma=0.0), failing=3)  # R0's three runs fail in host code
    run = run_loop(wf, policy, tb, rounds=2, repeats=3)
    assert not run.rounds[0].judged and run.rounds[1].judged
    assert policy.forecaster is not None
    # R1's runs and every probe; none of R0's runs
    assert policy.forecaster.executions == 3 + run.probes_total


def test_a_bad_input_among_a_rounds_runs_does_not_make_the_model_drop_its_mapping():
    """The round is judged by its runs that ended (model.rounds.speaks); the forecaster's model used
    to count the bad run as a failure of the mapping and never predict it again."""
    import dataclasses

    from agentsched.model.execution import Status

    class OneBadInput(SimTestbed):
        runs = 0

        def run(self, workflow, mapping, *, rng=None, inputs=None):
            x = super().run(workflow, mapping, rng=rng)
            OneBadInput.runs += 1
            if OneBadInput.runs != 1:  # the first: nothing ran well before it
                return x
            return dataclasses.replace(
                x,
                status=Status.ERROR,
                e2e_ms=None,
                message="node A failed: bad input",
                extra={**x.extra, "failed_task": "A"},
            )

    wf = load_scenario("S5")
    policy = AgentPolicy("rules", predictions=True)
    run = run_loop(wf, policy, OneBadInput(noise_sigma=0.0), rounds=1, repeats=3)
    first = run.rounds[0]
    assert first.ok and first.executions[0].status is Status.ERROR
    planner = policy.forecaster.planner
    assert planner.evidence.measured(planner.key(first.mapping)) is not None
