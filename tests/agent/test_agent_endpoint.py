"""The LLM endpoint as a new user meets it (issue 13 item 4): 5xx at preflight retried with backoff,
one clean clause per error, a notice while a call is slow, and answers that a tiny model gives
without a schema ({} and the template's placeholder) handled as invalid, then re-asked."""

from __future__ import annotations

import pytest

from agentsched.agent.llm import LLMConfig, LLMReasoner, parse_answer, response_schema
from agentsched.agent.local_llm import completion, error_body
from agentsched.agent.policy import AgentPolicy
from agentsched.errors import AgentschedError, PolicyError
from agentsched.loop.runner import run_loop
from agentsched.model.workflow import Mode
from tests.support.scripted_testbed import ScriptedTestbed, workflow

GOOD = '{"mapping": {"A": "gpu", "B": "gpu", "C": "cpu", "D": "gpu"}, "reason": "ratios"}'


def reasoner(url, sleeps=None, notices=None, **options):
    config = LLMConfig.from_options({"base_url": url, "model": "m", "timeout_s": 2, **options}, {})
    return LLMReasoner(
        config,
        sleep=(sleeps if sleeps is not None else []).append,
        notify=(notices if notices is not None else []).append,
    )


def status(code, message="overloaded"):
    return lambda body, s: (code, error_body(message, "server_error"))


# ---- preflight: 5xx retried with backoff ---------------------------------------------------------------
def test_preflight_retries_a_5xx_with_backoff_then_succeeds(serve):
    server, script = serve(status(503), status(500), GOOD)
    sleeps = []
    reasoner(server.base_url, sleeps).preflight()
    assert script.calls == 3 and sleeps == [1.0, 2.0]  # exponential backoff, injected sleep


def test_preflight_gives_up_after_its_retries_in_one_clean_clause(serve):
    server, script = serve(status(500, "model is loading"))
    sleeps = []
    with pytest.raises(PolicyError) as e:
        reasoner(server.base_url, sleeps, preflight_retries=2, backoff_s=0.5).preflight()
    assert script.calls == 3 and sleeps == [0.5, 1.0]
    assert str(e.value) == (
        f"LLM endpoint {server.base_url} is not usable: HTTP 500: model is loading after 3 attempts"
    )


@pytest.mark.parametrize(
    "reply, reason",
    [
        (status(401, "bad key"), "HTTP 401: bad key"),  # permanent: no retry
        (status(501, "not implemented"), "HTTP 501: not implemented"),
        (lambda body, s: (502, {"unexpected": True}), "HTTP 502 after 2 attempts"),  # no message in the body
    ],
)
def test_preflight_does_not_retry_permanent_errors_and_never_repeats_itself(serve, reply, reason):
    server, script = serve(reply)
    sleeps = []
    with pytest.raises(PolicyError) as e:
        reasoner(server.base_url, sleeps, preflight_retries=1).preflight()
    assert str(e.value) == f"LLM endpoint {server.base_url} is not usable: {reason}"
    assert "Error code" not in str(e.value)
    assert script.calls == (2 if "attempts" in reason else 1)


def test_preflight_succeeds_once_per_reasoner(serve):
    server, script = serve(GOOD)
    r = reasoner(server.base_url)
    r.preflight()
    r.preflight()  # e.g. bench: one policy, many workflows
    assert script.calls == 1


# ---- a notice while a call is slow ----------------------------------------------------------------------
def test_a_slow_call_prints_one_waiting_line(serve):
    def slow(body, script):
        script.server.stopping.wait(0.6)
        return 200, completion(GOOD, "m")

    server, _ = serve(slow, GOOD)
    notices = []
    r = reasoner(server.base_url, notices=notices, notice_after_s=0.2)
    r.preflight()
    assert notices == [f"waiting for the LLM endpoint {server.base_url} (model m) ... (0.2 s)"]
    r.preflight()  # already done: nothing
    fast = reasoner(server.base_url, notices=notices, notice_after_s=1.5)
    fast.preflight()  # answers at once: no line
    assert len(notices) == 1


def test_the_waiting_line_goes_to_stderr_by_default(serve, capfd):
    def slow(body, script):
        script.server.stopping.wait(0.5)
        return 200, completion(GOOD, "m")

    server, _ = serve(slow)
    config = LLMConfig.from_options(
        {"base_url": server.base_url.replace("http://", "http://u:secret-pw@"), "model": "m", "notice_after_s": 0.1}, {}
    )
    LLMReasoner(config).preflight()
    err = capfd.readouterr().err
    assert (
        err == f"waiting for the LLM endpoint {server.base_url.replace('http://', 'http://***@')} "
        "(model m) ... (0.1 s)\n"
    )


# ---- answers a schema would have prevented --------------------------------------------------------------
def test_schema_names_every_task_and_the_modes():
    wf = workflow()  # three-way
    rf = response_schema(wf)
    mapping = rf["json_schema"]["schema"]["properties"]["mapping"]
    assert rf["type"] == "json_schema" and mapping["required"] == ["A", "B", "C", "D"]
    assert mapping["properties"]["A"]["enum"] == ["cpu", "gpu_now", "gpu_queue"]


@pytest.mark.parametrize(
    "answer, message",
    [
        ("{}", "the answer's mapping is empty: give every task (A, B, C, D) a mode"),
        ('{"mapping": {}, "reason": "x"}', "the answer's mapping is empty"),
        (
            '{"mapping": {"<task>": "<mode>"}, "reason": "<one sentence>"}',
            "the answer copied the template's placeholder (<task>: <mode>): name the real tasks (A, B, C, D) and modes",
        ),
        ('{"mapping": {"A": "<mode>", "B": "cpu", "C": "cpu", "D": "cpu"}}', "placeholder (A: <mode>)"),
    ],
)
def test_empty_and_placeholder_answers_are_invalid(answer, message):
    with pytest.raises(AgentschedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_answer(answer, workflow())


def test_empty_and_placeholder_answers_are_re_asked_with_the_reason(serve):
    placeholder = '{"mapping": {"<task>": "<mode>"}, "reason": "<one sentence>"}'
    server, script = serve("{}", placeholder, GOOD)
    policy = AgentPolicy("llm", llm={"base_url": server.base_url, "model": "m", "timeout_s": 2})
    r = run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=1, repeats=1)
    assert r.rounds[0].mapping == {"A": Mode.GPU_NOW, "B": Mode.GPU_NOW, "C": Mode.CPU, "D": Mode.GPU_NOW}
    info = r.records[0].proposal_info
    assert info["fallback"] is None and [a.get("ok", False) for a in info["response"]] == [False, False, True]
    assert "mapping is empty" in server.requests[1]["messages"][-1]["content"]
    assert "copied the template's placeholder" in server.requests[2]["messages"][-1]["content"]


def test_always_empty_answers_fall_back_to_the_rules(serve):
    server, script = serve("{}")
    policy = AgentPolicy("llm", llm={"base_url": server.base_url, "model": "m", "timeout_s": 2, "max_retries": 1})
    r = run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=3, repeats=1)
    rules = run_loop(workflow("binary", None), AgentPolicy("rules"), ScriptedTestbed(), rounds=3, repeats=1)
    assert [x.mapping for x in r.rounds] == [x.mapping for x in rules.rounds]
    assert script.calls == 6  # invalid answers never open the circuit
    assert all(
        rec.proposal_info["fallback"].startswith("invalid answer after 2 attempt(s): the answer's mapping is empty")
        for rec in r.records
    )
