"""The reasoner protocol's fallback: an LLM that gives nothing usable degrades agent-llm to agent-rules
quality, round for round, on the simulated S5 (issue 8's done-when test), against a loopback server."""

from __future__ import annotations

import pytest

from agentsched.agent.local_llm import ChatServer, completion
from agentsched.agent.policy import AgentPolicy
from agentsched.agent.reasoner import Decision, FallbackReasoner, NoDecision, Reasoner
from agentsched.agent.rules import RulesReasoner
from agentsched.loop.metrics import oracle_view, run_metrics
from agentsched.loop.runner import run_loop
from agentsched.model.workflow import Mode
from agentsched.oracle import brute_force
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed

# what a broken or tiny model answers: prose, an empty object, the template copied verbatim
GARBAGE = (
    "I would put everything on the GPU, it is faster!",
    "{}",
    '{"mapping": {"<task>": "<mode>"}, "reason": "<one sentence>"}',
)


@pytest.fixture
def garbage_server():
    n = {"calls": 0}

    def backend(body):
        n["calls"] += 1
        return 200, completion(GARBAGE[n["calls"] % len(GARBAGE)], "garbage")

    with ChatServer(backend, model="garbage") as server:
        yield server, n


def _run(policy, wf, rounds=6, seed=0):
    return run_loop(wf, policy, SimTestbed(seed=seed), rounds=rounds, repeats=3, seed=seed)


def test_garbage_llm_reaches_the_oracle_on_s5_within_4_rounds(garbage_server):
    server, n = garbage_server
    wf = load_scenario("S5")
    view = oracle_view(wf, brute_force(wf, SimTestbed(noise_sigma=0)))  # scoring only
    llm = AgentPolicy("llm", llm={"base_url": server.base_url, "model": "garbage", "max_retries": 1})
    run = _run(llm, wf)
    first = run_metrics(run, view).first_equivalent_round
    assert first is not None and first <= 3
    assert view.equivalent(run.rounds[-1].mapping)  # and it stays there
    assert n["calls"] == 2 * 6  # every round asked (1 + max_retries requests): garbage never opens the circuit
    # the same evidence gives the same decisions: round for round what agent-rules chose
    rules = _run(AgentPolicy("rules"), wf)
    assert [r.mapping for r in run.rounds] == [r.mapping for r in rules.rounds]
    assert [r.e2e_ms for r in run.rounds] == [r.e2e_ms for r in rules.rounds]
    for rec, ref in zip(run.records, rules.records, strict=True):
        info = rec.proposal_info
        assert info["fallback"].startswith("invalid answer after 2 attempt(s): ")
        assert info["fallback"].endswith(
            f"falling back to the rules reasoner on the same evidence ({ref.proposal_info['reason']})"
        )
        assert [a.get("content") is not None for a in info["response"]] == [True, True, False]


class Flaky(Reasoner):
    """Decides on even rounds only."""

    name = "flaky"

    def __init__(self):
        self.resets = self.closed = self.preflights = 0

    def reset(self):
        self.resets += 1

    def propose(self, view):
        if view.round % 2:
            raise NoDecision("odd round", {"response": [{"attempt": 1, "error": "odd"}], "tried": True})
        return Decision({t: Mode.CPU for t in view.workflow.task_ids}, "all cpu", {"reasoner": "flaky"})

    def preflight(self):
        self.preflights += 1

    def close(self):
        self.closed += 1


class SpyRules(RulesReasoner):
    """The rules reasoner, remembering which rounds it was asked about and what it decided."""

    def __init__(self):
        super().__init__()
        self.asked = {}

    def propose(self, view):
        d = super().propose(view)
        self.asked[view.round] = d
        return d


def test_fallback_reasoner_forwards_the_protocol_and_records_why():
    wf = load_scenario("S1")
    flaky, spy = Flaky(), SpyRules()
    policy = AgentPolicy("rules")
    policy.reasoner = FallbackReasoner(flaky, spy)
    assert policy.label == "agent-flaky"
    policy.preflight(wf)
    run = _run(policy, wf, rounds=4)
    assert sorted(spy.asked) == [1, 3]  # the rules were asked only for the rounds the primary gave up
    all_cpu = {t: Mode.CPU for t in wf.task_ids}
    for rec in run.records:
        info = rec.proposal_info
        if rec.result.round % 2 == 0:
            assert rec.result.mapping == all_cpu and info["reason"] == "all cpu" and "fallback" not in info
            continue
        d = spy.asked[rec.result.round]
        assert rec.result.mapping == d.mapping
        assert info["tried"] is True and info["fallback_reasoner"] == "rules"  # the primary's audit is kept
        assert (
            info["reason"]
            == info["fallback"]
            == f"odd round; falling back to the rules reasoner on the same evidence ({d.reason})"
        )
        assert info["response"] == [
            {"attempt": 1, "error": "odd"},
            {"fallback": info["fallback"], "mapping": info["mapping"]},
        ]
    policy.close()
    assert (flaky.preflights, flaky.resets, flaky.closed) == (1, 1, 1)


def test_rules_reasoner_always_decides_with_an_audit():
    wf = load_scenario("S1")
    policy = AgentPolicy("rules")
    run = _run(policy, wf, rounds=2)
    assert all(rec.proposal_info["reasoner"] == "rules" and rec.proposal_info["reason"] for rec in run.records)
    assert isinstance(policy.reasoner, RulesReasoner) and not isinstance(policy.reasoner, FallbackReasoner)


def test_a_bench_says_how_many_rounds_the_fallback_decided(serve):
    """(An endpoint answering garbage every round gave an agent-llm bench row with no note, read as the
    LLM's own results.)"""
    import jsonschema

    from agentsched.experiments.bench import BenchConfig, run_bench
    from agentsched.experiments.results import results_dict, results_schema

    server, _ = serve("I believe the GPU is a kind of potato")
    config = BenchConfig(
        scenarios=("S1",),
        policies=("agent-llm", "heft"),
        rounds=3,
        repeats=1,
        seeds=(0,),
        policy_options={"agent-llm": {"llm": {"base_url": server.base_url, "model": "m"}}},
    )
    doc = results_dict(run_bench(config))
    assert "agent-llm: 3 of 3 rounds were decided by its fallback reasoner" in " ".join(doc["notes"])
    assert not any(n.startswith("heft:") for n in doc["notes"])
    runs = {r["policy"]: r for r in doc["records"]}
    assert all("falling back to the rules reasoner" in d["fallback"] for d in runs["agent-llm"]["rounds"])
    assert not any("fallback" in d for d in runs["heft"]["rounds"])
    jsonschema.validate(doc, results_schema())


def test_rounds_the_llm_decided_itself_are_not_marked(serve):
    """(The LLM reasoner's audit holds "fallback": None when it decided: such rounds were counted.)"""
    from agentsched.experiments.bench import BenchConfig, run_bench
    from agentsched.experiments.results import results_dict

    server, _ = serve('{"mapping": {"A": "gpu", "B": "gpu", "C": "gpu", "D": "gpu"}, "reason": "r"}')
    config = BenchConfig(
        scenarios=("S1",),
        policies=("agent-llm",),
        rounds=2,
        repeats=1,
        seeds=(0,),
        policy_options={"agent-llm": {"llm": {"base_url": server.base_url, "model": "m"}}},
    )
    doc = results_dict(run_bench(config))
    assert not any("fallback reasoner" in n for n in doc["notes"])
    assert not any("fallback" in d for d in doc["records"][0]["rounds"])
