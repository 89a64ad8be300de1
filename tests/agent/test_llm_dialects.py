"""The structured-output chain learns each server's dialect (issue 21, items 2 and 4): one loopback
mimic per server kind (tests/support/llm_servers.py) backs each row of docs/agent.md's conformance
table. A mimic answers with a valid mapping only when the schema reached the field it honours, so a
valid round proves the handoff."""

from __future__ import annotations

import pytest

from agentsched.agent.llm import LLMConfig
from agentsched.agent.llm.dialects import chain, identify, rejects_link
from agentsched.agent.local_llm import completion
from agentsched.agent.policy import AgentPolicy
from agentsched.errors import PolicyError
from agentsched.loop.runner import run_loop
from tests.support.llm_servers import MIMICS, UNCONSTRAINED, link_of
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow

ALL_CPU = mapping("cpu cpu cpu cpu")  # each task's first enum value: the mimics' constrained answer

# the conformance table: server -> (links rejected in round 0, the link that works, the learned kind)
CONFORMANCE = {
    "openai": ([], "json_schema", None),
    "vllm": ([], "json_schema", None),
    "vllm-old": (["json_schema"], "guided_json", "vllm"),
    "llama.cpp": ([], "json_schema", None),
    "llama-cpp-python": (["json_schema"], "json_object+schema", "llama-cpp-python"),
    "ollama": ([], "json_schema", None),
    "ollama-old": (["json_schema"], "format", "ollama"),
}


def run(url, rounds=2, policy=None, **llm):
    policy = policy or AgentPolicy("llm", llm={"base_url": url, "model": "mimic", "timeout_s": 10.0, **llm})
    return policy, run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=rounds, repeats=1)


@pytest.mark.parametrize("name", list(CONFORMANCE))
def test_each_server_gets_the_schema_where_it_reads_it(name):
    rejected, works, learned = CONFORMANCE[name]
    server = MIMICS[name].serve()
    try:
        policy, r = run(server.base_url, rounds=3)
        sent = [link_of(b) for b in server.requests]
        assert [x.mapping for x in r.rounds] == [ALL_CPU] * 3  # the model's constrained answer, never a fallback
        assert all(rec.proposal_info["fallback"] is None for rec in r.records)
        assert sent == [*rejected, works, works, works]  # the working link remembered for the run
        first = r.records[0].proposal_info["response"][0]
        assert first["response_format"] == works  # the audit names the link used
        assert [x.split(":")[0] for x in first.get("response_format_rejected", [])] == rejected
        assert first.get("server") == learned and policy.reasoner.primary.server == (learned or "auto")
        assert all(rec.proposal_info["response"][0]["response_format"] == works for rec in r.records)
        # a new run starts from the learned server's own chain (llama-cpp-python: no refused request)
        run(server.base_url, rounds=1, policy=policy)
        again = [link_of(b) for b in server.requests[len(sent) :]]
        assert again == ([works] if learned == "llama-cpp-python" else [*rejected, works])
    finally:
        server.close()


def test_without_the_schema_a_mimic_answers_like_a_tiny_model():
    # the control: the same mimic with structured output off answers {} and the rules decide
    server = MIMICS["llama-cpp-python"].serve()
    try:
        _, r = run(server.base_url, rounds=1, response_format="plain", max_retries=0)
    finally:
        server.close()
    info = r.records[0].proposal_info
    assert info["response"][0]["content"] == UNCONSTRAINED and info["fallback"].startswith("invalid answer")


def test_the_server_option_skips_learning():
    server = MIMICS["llama-cpp-python"].serve()
    try:
        policy, r = run(server.base_url, rounds=1, server="llama-cpp-python")
    finally:
        server.close()
    assert [link_of(b) for b in server.requests] == ["json_object+schema"]
    assert r.rounds[0].mapping == ALL_CPU


def test_an_unknown_server_that_refuses_json_schema_gets_json_object_with_the_schema(serve):
    def refuse(body, script):
        if link_of(body) == "json_schema":
            return 400, {"error": {"message": "unsupported response_format"}}
        return 200, completion('{"mapping": {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"}, "reason": "r"}', "m")

    server, _ = serve(refuse)
    policy, r = run(server.base_url, rounds=1)
    assert [link_of(b) for b in server.requests] == ["json_schema", "json_object+schema"]
    assert policy.reasoner.primary.server == "generic"  # GET /models says owned_by agentsched


@pytest.mark.parametrize(
    "owned_by, url, kind",
    [
        ("vllm", "http://h:8000/v1", "vllm"),
        ("llamacpp", "http://h:8080/v1", "llama.cpp"),
        ("me", "http://h:8000/v1", "llama-cpp-python"),
        ("library", "http://h:9/v1", "ollama"),
        (None, "http://h:11434/v1", "ollama"),
        ("system", "https://api.example.com/v1", "openai"),
        ("someone", "http://h/v1", "generic"),
        (None, "http://h/v1", "generic"),
    ],
)
def test_identify(owned_by, url, kind):
    models = {"object": "list", "data": [{"id": "m", "owned_by": owned_by}]} if owned_by else None
    assert identify(models, url) == kind


def test_chains_and_rejections():
    assert chain("auto") == ["json_schema", "json_object+schema", "json_object", "plain"]
    assert chain("vllm") == ["json_schema", "guided_json", "json_object", "plain"]
    assert chain("ollama", "json_object") == ["json_object", "plain"]
    assert chain("auto", "guided_json") == ["guided_json", "json_object", "plain"]  # implies vLLM
    assert rejects_link(400, "anything") and rejects_link(422, "")
    assert rejects_link(500, "1 validation error ... response_format.type Input should be 'text' or 'json_object'")
    assert not rejects_link(500, "out of memory") and not rejects_link(503, "")


def test_server_option_is_checked():
    with pytest.raises(
        PolicyError,
        match="llm server must be one of auto, generic, openai, vllm, ollama, llama.cpp, llama-cpp-python, got 'tgi'",
    ):
        LLMConfig.from_options({"base_url": "http://h/v1", "model": "m", "server": "tgi"}, {})
