"""No policy can reach the simulated world: the same workflow under two worlds gives every
registered online policy identical inputs (the PolicyContext's workflow and cards, the LLM's
prompt) and identical round-0 proposals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsched.agent.local_llm import ChatServer, completion
from agentsched.loop.registry import REGISTRY, is_available, make_policy
from agentsched.loop.runner import run_loop
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import World, load_world, parse_world

ONLINE = [name for name, spec in REGISTRY.items() if spec.online]
# two worlds far apart: the calibrated one, and every GPU tool pressing and suffering hard
WORLDS = ("a5500", {"name": "harsh", "default": {"sensitivity": 5.0, "pressure": 5.0}})


def _answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A fixed, valid answer for the 4-task scenarios, so the LLM's round 0 is its own choice."""
    return 200, completion(json.dumps({"mapping": {t: "cpu" for t in "ABCD"}, "reason": "fixed"}), "scripted")


@pytest.fixture
def llm_server():
    server = ChatServer(_answer, model="scripted").start()
    yield server
    server.close()


def _round0(policy_name: str, scenario: str, world: Any, server: ChatServer, **extra: Any) -> dict[str, Any]:
    opts: dict[str, Any] = dict(extra)
    if policy_name == "agent-llm":
        opts["llm"] = {"base_url": server.base_url, "model": "scripted", "timeout_s": 5.0}
    policy = make_policy(policy_name, **opts)
    seen: list[Any] = []
    reset = policy.reset

    def spy(ctx: Any) -> None:
        seen.append(ctx)
        reset(ctx)

    policy.reset = spy  # type: ignore[method-assign]
    asked = len(server.requests)
    tb = SimTestbed(world=_world(world))
    run = run_loop(load_scenario(scenario), policy, tb, rounds=1, repeats=1, seed=0)
    (ctx,) = seen
    return {
        "workflow": ctx.workflow,
        "cards": ctx.cards,
        "rounds": ctx.rounds,
        "repeats": ctx.repeats,
        "mapping": run.rounds[0].mapping,
        "probes": [p.mapping for p in run.records[0].probes],
        "prompts": server.requests[asked:],
    }


def _world(ref: str | dict[str, Any]) -> World:
    return load_world(ref) if isinstance(ref, str) else parse_world(ref, ref["name"])


def test_the_two_worlds_differ_on_the_testbed():
    wf = load_scenario("S5")
    all_gpu = {t: Mode.GPU_NOW for t in wf.task_ids}
    a, b = (SimTestbed(noise_sigma=0.0, world=_world(w)).run(wf, all_gpu).e2e_ms for w in WORLDS)
    assert b > 1.5 * a  # same cards, same mapping: only the world changed


@pytest.mark.parametrize("scenario", ["S5", "S13"])
@pytest.mark.parametrize("policy_name", ONLINE)
def test_two_worlds_give_identical_policy_inputs_and_round0_proposals(policy_name, scenario, llm_server):
    if not is_available(policy_name):
        pytest.skip(f"{policy_name} is not installed")
    a, b = (_round0(policy_name, scenario, w, llm_server) for w in WORLDS)
    for key in ("workflow", "cards", "rounds", "repeats", "mapping", "probes", "prompts"):
        assert a[key] == b[key], key
    if policy_name == "agent-llm":
        assert a["prompts"]  # the LLM was asked, with the same messages in both worlds


@pytest.mark.parametrize("scenario", ["S5", "S13"])
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_two_worlds_give_identical_inputs_with_model_predictions(scenario, start, llm_server):
    # the fifth stream (the planner's model, fed by the agent's executions) reads the cards and a prior,
    # never the world: round 0's prompt, predictions included, is the same under both worlds
    a, b = (_round0("agent-llm", scenario, w, llm_server, predictions=True, start=start) for w in WORLDS)
    for key in ("workflow", "cards", "rounds", "repeats", "mapping", "probes", "prompts"):
        assert a[key] == b[key], key
    user = a["prompts"][0]["messages"][-1]["content"]
    assert "## 5. Model predictions" in user
    assert ("| P1 |" in user) == (start == "warm")  # warm predicts from the cards; cold has seen nothing yet


def test_the_world_is_not_in_the_workflow_cards_or_context():
    wf = load_scenario("S5")
    assert "world" not in type(wf).model_fields
    assert all("contention" not in f for f in type(wf.task_cards["A"]).model_fields)
