"""The policy registry: names, options, lazy imports, one-line errors."""

from __future__ import annotations

import sys

import pytest

from agentsched.errors import PolicyError
from agentsched.loop import registry
from agentsched.loop.registry import (
    accepts,
    baseline_policies,
    is_available,
    list_policies,
    make_policy,
)

VALID = "all-gpu, heft, heft-cf, ucb1, starpu, mem-greedy, oracle, agent-rules, agent-rules-cold, agent-llm, agent-plan, agent-plan-cold"


def test_names_in_report_order():
    assert ", ".join(list_policies()) == VALID
    assert baseline_policies() == ["all-gpu", "heft", "heft-cf", "ucb1", "starpu", "mem-greedy"]


@pytest.mark.parametrize(
    "name,cls",
    [
        ("all-gpu", "AllGpuPolicy"),
        ("heft", "HeftPolicy"),
        ("heft-cf", "HeftCfPolicy"),
        ("ucb1", "Ucb1Policy"),
        ("starpu", "StarpuPolicy"),
        ("mem-greedy", "MemGreedyPolicy"),
        ("oracle", "OracleRefPolicy"),
    ],
)
def test_each_baseline_builds_with_its_name(name, cls):
    p = make_policy(name)
    assert type(p).__name__ == cls
    assert p.name == name
    assert p.online is (name != "oracle")


def test_names_are_case_insensitive():
    assert make_policy("HEFT-CF").name == "heft-cf"


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(PolicyError) as e:
        make_policy("hefty")
    assert str(e.value) == f"unknown policy 'hefty' (valid: {VALID})"


def test_start_on_a_baseline_is_refused():
    with pytest.raises(PolicyError) as e:
        make_policy("heft", start="cold")
    assert str(e.value) == "policy heft has no cold start (--start is for agent-rules, agent-llm, agent-plan)"


def test_llm_options_on_a_baseline_are_refused():
    with pytest.raises(PolicyError, match=r"^policy ucb1 takes no LLM options \(they are for agent-llm\)$"):
        make_policy("ucb1", llm={"model": "x"})


def test_unknown_option_names_the_accepted_ones():
    with pytest.raises(PolicyError) as e:
        make_policy("heft-cf", factor=2)
    assert str(e.value) == "policy heft-cf takes no option 'factor' (options: contention_factor, cpu_cores, machine)"
    with pytest.raises(PolicyError, match=r"\(options: none\)$"):
        make_policy("all-gpu", cpu_cores=2)


def test_options_reach_the_constructor():
    assert make_policy("heft-cf", contention_factor=1.25).contention_factor == 1.25
    assert make_policy("heft", cpu_cores=3).cpu_cores == 3


def test_agent_entries_accept_their_options():
    assert accepts("agent-rules", "start") and accepts("agent-rules", "monitor")
    assert not accepts("agent-rules", "llm")
    assert accepts("agent-llm", "llm")


def test_unimportable_agent_fails_only_when_chosen(monkeypatch):
    monkeypatch.setitem(sys.modules, "agentsched.agent.policy", None)  # import now raises ImportError
    assert "agent-rules" in list_policies()
    assert not is_available("agent-rules")
    with pytest.raises(PolicyError) as e:
        make_policy("agent-rules", start="cold")
    msg = str(e.value)
    assert msg.startswith("policy agent-rules is unavailable: cannot import agentsched.agent.policy:AgentPolicy (")
    assert "\n" not in msg
    assert make_policy("heft").name == "heft"  # the others are unaffected


def test_agent_entries_pass_the_reasoner(monkeypatch):
    seen = {}

    class FakeAgent:  # the registry reads the options from this signature
        def __init__(self, reasoner="rules", *, start=None, llm=None, monitor=None):
            seen.update(reasoner=reasoner, start=start, llm=llm)

    monkeypatch.setattr(registry, "_load_class", lambda spec: FakeAgent)
    make_policy("agent-llm", start="warm", llm={"model": "m"})
    assert seen == {"reasoner": "llm", "start": "warm", "llm": {"model": "m"}}


def test_options_are_read_from_the_constructor_signature(monkeypatch):
    from agentsched.loop.registry import get_spec, option_defaults

    assert get_spec("agent-plan").options == {"start", "probe_fraction", "probes_per_round", "min_gain", "config"}
    assert get_spec("agent-plan-cold").options == {
        "probe_fraction",
        "probes_per_round",
        "min_gain",
        "config",
    }  # start fixed
    assert get_spec("agent-llm").options == {"start", "llm", "monitor", "stability", "initial", "predictions"}
    assert get_spec("agent-rules").options == {"start", "monitor", "stability", "initial"}  # not the LLM's
    assert get_spec("oracle").options == {"oracle"} and get_spec("oracle").public_options == set()
    assert option_defaults("ucb1") == {"exploration": 2.0}
    assert option_defaults("heft-cf") == {"contention_factor": 0.5, "cpu_cores": None, "machine": "parallel"}

    class Fresh:  # a new keyword argument is a new option: declared once, in the constructor
        def __init__(self, *, alpha: float = 1.0, beta: int | None = None, **rest):
            self.alpha, self.beta = alpha, beta

    monkeypatch.setattr(registry, "_load_class", lambda spec: Fresh)
    assert get_spec("ucb1").options == {"alpha", "beta"}
    assert make_policy("ucb1", alpha=3.0).alpha == 3.0
    with pytest.raises(PolicyError, match=r"^policy ucb1 takes no option 'exploration' \(options: alpha, beta\)$"):
        make_policy("ucb1", exploration=1.0)


def test_the_default_policy_beyond_the_planner_cap_is_agent_rules():
    from agentsched.model.workflow import Workflow
    from agentsched.planner.search import MAX_PLAN_TASKS

    def wide(n, tool="clip"):
        return Workflow(name="wide", tasks={f"T{i}": tool for i in range(n)})

    assert registry.default_policy(wide(MAX_PLAN_TASKS)) == "agent-plan"
    assert registry.default_policy(wide(MAX_PLAN_TASKS + 1)) == "agent-rules"
    unprofiled = "tests.support.echo_tool:Echo"  # a user tool without a card: cold start
    assert registry.default_policy(wide(MAX_PLAN_TASKS, unprofiled)) == "agent-plan-cold"
    assert registry.default_policy(wide(MAX_PLAN_TASKS + 1, unprofiled)) == "agent-rules-cold"
