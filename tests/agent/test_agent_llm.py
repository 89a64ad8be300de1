"""The llm reasoner against an in-process OpenAI-compatible HTTP server on 127.0.0.1 (port 0).

Each scripted reply is handled as specified, never with a traceback, and the run's history stays
intact. No real network: the server is loopback only; the refused-connection case points at a port
that was bound and closed.
"""

from __future__ import annotations

import json
import logging
import socket

import pytest

from agentsched.agent.llm import LLMConfig, parse_answer, strip_reasoning
from agentsched.agent.local_llm import completion, error_body
from agentsched.agent.policy import AgentPolicy
from agentsched.errors import AgentschedError, PolicyError
from agentsched.loop.runner import run_loop
from agentsched.model.workflow import Mode
from tests.support.llm_servers import link_of
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow

GOOD = '{"mapping": {"A": "gpu", "B": "gpu", "C": "cpu", "D": "gpu"}, "reason": "ratios"}'
GOOD_MAP = mapping("gpu gpu cpu gpu")


def slow(body, script):
    script.server.stopping.wait(3.0)  # past the client's 0.5 s timeout; cut short at shutdown
    return 200, completion(GOOD, "scripted")


def reject_json_mode(body, script):
    if "response_format" in body:
        return 400, error_body("response_format is not supported by this server")
    return 200, completion(GOOD, "scripted")


def run(wf, base_url, rounds=3, **llm):
    # a generous timeout: a loaded test machine must not turn a scripted answer into a timeout
    policy = AgentPolicy(
        "llm", llm={"base_url": base_url, "model": "scripted", "timeout_s": 10.0, "max_retries": 2, **llm}
    )
    return policy, run_loop(wf, policy, ScriptedTestbed(), rounds=rounds, repeats=1)


def binary():
    return workflow("binary", None)


def test_valid_json_is_used_and_audited(serve):
    server, script = serve(GOOD)
    policy, r = run(binary(), server.base_url, rounds=2)
    assert [x.mapping for x in r.rounds] == [GOOD_MAP, GOOD_MAP]
    info = r.records[0].proposal_info
    assert info["fallback"] is None and info["reason"] == "ratios"
    assert [a["content"] for a in info["response"]] == [GOOD] and "## 1. DAG topology" in info["prompt"]
    assert policy.label == "agent-llm:scripted"
    assert info["model"] == "scripted" and info["base_url"] == server.base_url
    body = server.requests[0]
    assert body["model"] == "scripted" and body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]["properties"]["mapping"]
    assert schema["required"] == ["A", "B", "C", "D"] and schema["additionalProperties"] is False
    assert all(schema["properties"][t] == {"type": "string", "enum": ["cpu", "gpu"]} for t in "ABCD")
    assert info["response"][0]["response_format"] == "json_schema"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    json.dumps(r.records[0].proposal_info)  # the audit record is JSON


def test_json_in_prose_and_think_blocks(serve):
    decoy = '{"mapping": {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"}}'
    text = f"<think>Maybe {decoy}? No: ratios say otherwise.</think>\nHere is my answer:\n```json\n{GOOD}\n```\nDone."
    server, _ = serve(text)
    _, r = run(binary(), server.base_url, rounds=1)
    assert r.rounds[0].mapping == GOOD_MAP
    assert r.records[0].proposal_info["fallback"] is None


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("this is not JSON at all {oops", "no JSON object"),
        ('{"mapping": {"A": "gpu", "B": "gpu", "C": "cpu"}}', "misses task(s) D"),
        ('{"mapping": {"A": "gpu", "B": "gpu_queue", "C": "cpu", "D": "gpu"}}', "outside the binary decision space"),
    ],
)
def test_invalid_answer_is_retried_with_the_error(serve, bad, needle):
    server, script = serve(bad, GOOD)
    _, r = run(binary(), server.base_url, rounds=1)
    assert r.rounds[0].mapping == GOOD_MAP
    info = r.records[0].proposal_info
    assert info["fallback"] is None and [a["content"] for a in info["response"]] == [bad, GOOD]
    assert needle in info["response"][0]["error"]
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": bad}
    assert retry[-1]["role"] == "user" and needle in retry[-1]["content"]


def test_still_invalid_falls_back_to_the_rules_reasoner(serve, caplog):
    server, script = serve(GOOD, "no json", "no json")
    caplog.set_level(logging.WARNING, logger="agentsched.agent")
    _, r = run(binary(), server.base_url, rounds=2, max_retries=1)
    assert [x.mapping for x in r.rounds] == [GOOD_MAP, GOOD_MAP]  # round 1 (the last): the rules keep the best
    info = r.records[1].proposal_info
    assert [a.get("content") for a in info["response"]] == ["no json", "no json", None]
    assert info["fallback"].startswith("invalid answer after 2 attempt(s)")
    assert "falling back to the rules reasoner on the same evidence (last round: keep the best" in info["fallback"]
    assert info["reason"] == info["fallback"] and info["fallback_reasoner"] == "rules"
    assert info["response"][-1] == {"fallback": info["fallback"], "mapping": "A=gpu,B=gpu,C=cpu,D=gpu"}
    assert any("falling back" in rec.getMessage() and rec.exc_info is None for rec in caplog.records)


def test_slow_response_times_out_and_falls_back(serve):
    server, script = serve(GOOD, slow)
    _, r = run(binary(), server.base_url, rounds=3, timeout_s=0.5)
    assert len(r.records) == 3 and all(x.mapping == GOOD_MAP for x in r.rounds)
    info = r.records[1].proposal_info
    assert info["fallback"].startswith("endpoint timed out after 0.5 s")
    # a timeout is not retried: one failed request, then the fallback record
    assert len(info["response"]) == 2 and "content" not in info["response"][0]
    assert info["response"][0]["error"] == "endpoint timed out after 0.5 s"


def test_refused_connection_falls_back_without_traceback(caplog):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    caplog.set_level(logging.WARNING, logger="agentsched.agent")
    wf = workflow(budget_mb=800)
    _, r = run(wf, f"http://127.0.0.1:{port}/v1", rounds=3)
    assert len(r.records) == 3 and all(x.ok for x in r.rounds)
    first = r.records[0].proposal_info
    # every round: the rules reasoner on that round's view (round 0: its initial rule)
    assert first["fallback"].startswith(f"endpoint unreachable at http://127.0.0.1:{port}/v1: connection refused")
    assert "rules reasoner on the same evidence (round 0" in first["fallback"]
    assert all("rules reasoner on the same evidence" in rec.proposal_info["fallback"] for rec in r.records)
    assert all(rec.exc_info is None for rec in caplog.records)
    # the monitor still ran: probes and evidence are intact
    assert r.records[0].evidence["summary"] and r.probes_total > 0


def reject(*kinds, status=400, message="response_format {kind} is not supported by this server"):
    """A backend that rejects requests whose response_format type is among ``kinds``."""

    def backend(body, script):
        kind = (body.get("response_format") or {}).get("type", "plain")
        if kind in kinds:
            return status, error_body(message.format(kind=kind))
        return 200, completion(GOOD, "scripted")

    return backend


def formats(server):
    return [link_of(b) for b in server.requests]


@pytest.mark.parametrize(
    "rejected, status, message, links, used",
    [
        (
            ("json_schema",),
            400,
            "response_format {kind} is not supported by this server",
            ["json_schema"],
            "json_object+schema",
        ),
        (("json_schema",), 422, "unprocessable", ["json_schema"], "json_object+schema"),
        (
            ("json_schema", "json_object"),
            400,
            "response_format {kind} is not supported by this server",
            ["json_schema", "json_object+schema", "json_object"],
            "plain",
        ),
        # an HTTP 500 is a rejection only when it names the response_format (llama.cpp, a bad grammar)
        (("json_schema",), 500, "failed to parse response_format: {kind}", ["json_schema"], "json_object+schema"),
    ],
)
def test_structured_output_chain(serve, rejected, status, message, links, used):
    server, _ = serve(reject(*rejected, status=status, message=message))
    policy, r = run(binary(), server.base_url, rounds=2)
    assert all(x.mapping == GOOD_MAP for x in r.rounds)
    assert formats(server) == [*links, used, used]  # remembered: no rejected request in round 1
    first = r.records[0].proposal_info["response"][0]
    assert first["response_format"] == used and first["server"] == "generic"  # learned from GET /models
    assert [x.split(":")[0] for x in first["response_format_rejected"]] == links
    assert f"HTTP {status}: " in first["response_format_rejected"][0]
    assert "response_format_rejected" not in r.records[1].proposal_info["response"][0]
    # remembered per run: a new run of the same policy asks for the schema again
    run_loop(binary(), policy, ScriptedTestbed(), rounds=1, repeats=1)
    assert formats(server)[-len(links) - 1 :] == [*links, used]


def test_a_500_that_does_not_name_the_format_is_an_endpoint_error(serve):
    server, _ = serve(reject("json_schema", status=500, message="out of memory"))
    _, r = run(binary(), server.base_url, rounds=1)
    assert formats(server) == ["json_schema"]  # not re-asked in another format within the round
    assert r.records[0].proposal_info["fallback"].startswith("endpoint answered HTTP 500: out of memory;")


def test_response_format_option_starts_the_chain_lower(serve):
    server, _ = serve(GOOD)
    run(binary(), server.base_url, rounds=1, response_format="plain")
    assert formats(server) == ["plain"]
    with pytest.raises(
        PolicyError,
        match="response_format must be one of json_schema, json_object.schema, guided_json, format, json_object, plain",
    ):
        LLMConfig.from_options({"base_url": "http://127.0.0.1:9/v1", "model": "m", "response_format": "xml"}, {})


def test_http_error_falls_back_in_one_clean_clause(serve):
    server, _ = serve(GOOD, lambda body, s: (500, error_body("boom", "server_error")))
    _, r = run(binary(), server.base_url, rounds=2)
    fallback = r.records[1].proposal_info["fallback"]
    # the SDK's own text ("Error code: 500 - {'error': ...}") repeats the status and the whole body
    assert fallback.startswith("endpoint answered HTTP 500: boom; falling back to the rules reasoner")
    assert "Error code" not in fallback and "{" not in fallback


def test_parse_answer_rules():
    wf = workflow()
    m, reason = parse_answer('{"mapping": {"A": "gpu_now", "B": "queue", "C": "cpu", "D": "GPU"}, "reason": "x"}', wf)
    assert m == {"A": Mode.GPU_NOW, "B": Mode.GPU_QUEUE, "C": Mode.CPU, "D": Mode.GPU_NOW} and reason == "x"
    assert parse_answer('{"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"}', wf)[0] == mapping("cpu cpu cpu cpu")
    with pytest.raises(AgentschedError, match="names unknown task"):
        parse_answer('{"mapping": {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu", "E": "cpu"}}', wf)
    with pytest.raises(AgentschedError, match="must be a string"):
        parse_answer('{"mapping": {"A": 1, "B": "cpu", "C": "cpu", "D": "cpu"}}', wf)
    assert strip_reasoning("abc</think>{}") == "{}"  # servers that drop the opening tag
    assert strip_reasoning("{} <think>unfinished") == "{} "


def test_config_from_options_and_environment():
    env = {
        "AGENTSCHED_LLM_BASE_URL": "http://127.0.0.1:9/v1/",
        "AGENTSCHED_LLM_MODEL": "m",
        "AGENTSCHED_LLM_API_KEY": "k",
        "AGENTSCHED_LLM_TIMEOUT_S": "3",
    }
    c = LLMConfig.from_options({"temperature": 0.0, "model": None}, env)
    assert (c.base_url, c.model, c.api_key, c.timeout_s, c.temperature) == ("http://127.0.0.1:9/v1", "m", "k", 3.0, 0.0)
    assert LLMConfig.from_options({"model": "x"}, env).model == "x"  # options win
    assert "api_key" not in c.to_dict()
    with pytest.raises(PolicyError, match="needs an endpoint"):
        LLMConfig.from_options({}, {})
    with pytest.raises(PolicyError, match="needs a model"):
        LLMConfig.from_options({"base_url": "http://127.0.0.1:9/v1"}, {})
    with pytest.raises(PolicyError, match="unknown llm option"):
        LLMConfig.from_options({"base_url": "u", "model": "m", "url": "x"}, {})
    with pytest.raises(PolicyError, match="timeout_s"):
        LLMConfig.from_options({"base_url": "u", "model": "m", "timeout_s": 0}, {})


def _refused_url():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


def test_circuit_breaker_stops_calling_a_blackholed_endpoint(serve, caplog):
    server, script = serve(slow)  # every request times out (0.5 s)
    caplog.set_level(logging.WARNING, logger="agentsched.agent")
    wf = workflow(budget_mb=800)
    policy, r = run(wf, server.base_url, rounds=5, timeout_s=0.5)
    assert script.calls == 2  # rounds 0 and 1 tried; rounds 2-4 did not call the endpoint
    assert len(r.records) == 5 and policy.reasoner.primary.circuit_open
    r1 = r.records[1].proposal_info
    assert r1["circuit_open"] == (
        "circuit open after 2 consecutive rounds without reaching the endpoint "
        "(last: endpoint timed out after 0.5 s); no more requests"
    )
    for rec in r.records[2:]:
        info = rec.proposal_info
        assert info["fallback"].startswith("endpoint not called: circuit open after 2 consecutive rounds")
        assert "rules reasoner on the same evidence" in info["fallback"]
        assert info["circuit_open"] == r1["circuit_open"]
        assert info["response"] == [{"fallback": info["fallback"], "mapping": info["mapping"]}]  # no request
    best = r.best_round()
    assert all(x.mapping == best.mapping for x in r.rounds[2:])  # the best-ever mapping, every later round
    tripped = [rec for rec in caplog.records if "circuit open" in rec.getMessage()]
    assert len(tripped) == 1 and tripped[0].exc_info is None  # logged once, when it trips


def test_circuit_breaker_on_a_refused_port_stays_open_in_the_next_run():
    url = _refused_url()
    wf = workflow(budget_mb=800)
    policy, r = run(wf, url, rounds=4)
    assert [("circuit_open" in rec.proposal_info) for rec in r.records] == [False, True, True, True]
    assert [len(rec.proposal_info["response"]) for rec in r.records] == [2, 2, 1, 1]  # request + fallback / fallback
    assert "endpoint unreachable" in r.records[1].proposal_info["circuit_open"]
    # a new run of the same policy (the bench reuses one): no request at all, and the audit says since when
    r2 = run_loop(wf, policy, ScriptedTestbed(), rounds=2, repeats=1)
    info = r2.records[0].proposal_info
    assert info["circuit_open"].startswith("held open since an earlier run: circuit open after 2 consecutive")
    assert info["fallback"].startswith("endpoint not called: held open")
    assert [len(rec.proposal_info["response"]) for rec in r2.records] == [1, 1]  # the fallback record only


def test_circuit_breaker_resets_on_an_answer_and_can_be_disabled(serve):
    server, script = serve(slow, GOOD, slow, GOOD)  # unreachable rounds never follow each other
    _, r = run(binary(), server.base_url, rounds=4)
    assert script.calls == 4 and not any("circuit_open" in rec.proposal_info for rec in r.records)
    url = _refused_url()
    policy, r = run(workflow(budget_mb=800), url, rounds=4, breaker_rounds=0)
    assert not policy.reasoner.primary.circuit_open
    assert all("endpoint unreachable" in rec.proposal_info["fallback"] for rec in r.records)


@pytest.mark.parametrize(
    "options, env, message",
    [
        ({"temperature": float("nan")}, {}, "llm temperature must be a finite number >= 0, got nan"),
        ({"temperature": -1}, {}, "llm temperature must be a finite number >= 0, got -1"),
        ({}, {"AGENTSCHED_LLM_TEMPERATURE": "nan"}, "AGENTSCHED_LLM_TEMPERATURE must be a finite number >= 0, got nan"),
        ({}, {"AGENTSCHED_LLM_TEMPERATURE": "warm"}, "AGENTSCHED_LLM_TEMPERATURE must be a number, got 'warm'"),
        ({"timeout_s": float("inf")}, {}, "llm timeout_s must be a finite number > 0, got inf"),
        ({}, {"AGENTSCHED_LLM_TIMEOUT_S": "nan"}, "AGENTSCHED_LLM_TIMEOUT_S must be a finite number > 0, got nan"),
        ({"breaker_rounds": -1}, {}, "llm breaker_rounds must be >= 0, got -1"),
        ({"max_retries": "x"}, {}, "llm max_retries must be an integer, got 'x'"),
    ],
)
def test_config_rejects_non_finite_and_bad_values(options, env, message):
    with pytest.raises(PolicyError) as e:
        LLMConfig.from_options({"base_url": "http://127.0.0.1:9/v1", "model": "m", **options}, env)
    assert str(e.value) == message


def test_cli_env_temperature_nan_is_one_line(cli, monkeypatch):
    monkeypatch.setenv("AGENTSCHED_LLM_TEMPERATURE", "nan")
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        "http://127.0.0.1:9/v1",
        "--llm-model",
        "m",
        "--rounds",
        "1",
        "--repeats",
        "1",
    )
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: AGENTSCHED_LLM_TEMPERATURE must be a finite number >= 0, got nan"]


# ---- preflight, permanent errors, the bench's shared breaker ---------------------------------------
def test_cli_run_and_bench_preflight_a_refused_endpoint_in_one_line(cli):
    url = _refused_url()
    for argv in (("run", "S1", "-p", "agent-llm"), ("bench", "--scenarios", "S1", "--policies", "agent-llm")):
        code, out, err = cli(
            *argv, "--llm-base-url", url, "--llm-model", "m", "--llm-timeout", "1", "--rounds", "1", "--repeats", "1"
        )
        assert code != 0 and out == ""
        assert err.splitlines() == [f"error: LLM endpoint {url} is not usable: connection refused"]


def test_cli_run_preflight_http_error_and_not_a_completion(cli, serve):
    for reply, reason in (
        ((401, error_body("bad key", "authentication_error")), "HTTP 401: "),
        ((200, {"hello": "world"}), "the answer is not a chat completion"),
    ):
        server, script = serve(lambda body, s, r=reply: r)
        code, out, err = cli(
            "run",
            "S1",
            "-p",
            "agent-llm",
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "scripted",
            "--llm-timeout",
            "1",
            "--rounds",
            "1",
            "--repeats",
            "1",
        )
        assert code != 0 and out == "" and script.calls == 1  # one request, no run
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: LLM endpoint {server.base_url} is not usable: {reason}")


def test_preflight_is_one_cheap_request_and_the_run_goes_on(cli, serve):
    server, _ = serve(GOOD)
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        server.base_url,
        "--llm-model",
        "scripted",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--no-oracle",
    )
    assert code == 0, err
    assert server.requests[0]["max_tokens"] == 1 and len(server.requests) >= 2


@pytest.mark.parametrize(
    "reply",
    [
        lambda body, s: (404, error_body("model scripted does not exist", "not_found_error")),
        lambda body, s: (401, error_body("bad key", "authentication_error")),
        lambda body, s: (200, {"object": "list", "data": []}),  # not a chat completion
    ],
)
def test_permanent_errors_open_the_circuit_at_once(serve, caplog, reply):
    server, script = serve(reply)
    caplog.set_level(logging.WARNING, logger="agentsched.agent")
    policy, r = run(workflow(budget_mb=800), server.base_url, rounds=4)
    assert script.calls == 1 and policy.reasoner.primary.circuit_open  # round 0 asked once; rounds 1-3 did not
    assert r.records[0].proposal_info["circuit_open"].startswith("circuit open after a permanent error")
    assert all(rec.proposal_info["fallback"].startswith("endpoint not called") for rec in r.records[1:])
    assert len([x for x in caplog.records if "circuit open" in x.getMessage()]) == 1  # logged once


def test_bench_shares_the_breaker_across_runs(serve):
    from agentsched.experiments.bench import BenchConfig, run_bench

    server, script = serve(lambda body, s: (403, error_body("forbidden", "permission_error")))
    config = BenchConfig(
        scenarios=("S1",),
        policies=("agent-llm",),
        rounds=3,
        repeats=1,
        seeds=(0, 1, 2),
        policy_options={"agent-llm": {"llm": {"base_url": server.base_url, "model": "scripted", "timeout_s": 10.0}}},
    )
    res = run_bench(config)
    assert len(res.records) == 3 and script.calls == 1  # seeds 1 and 2 never called the endpoint
    assert any(n.startswith("agent-llm: the LLM endpoint failed in S1 seed 0") for n in res.notes)


# ---- answers that break the parser; endpoint URLs --------------------------------------------------
def test_deeply_nested_json_is_an_invalid_answer(serve):
    deep = '{"mapping": ' + "[" * 100000
    with pytest.raises(AgentschedError, match="nested too deeply"):
        parse_answer(deep, workflow())
    server, script = serve(deep, deep, deep, GOOD)
    _, r = run(binary(), server.base_url, rounds=2)
    first = r.records[0].proposal_info
    assert "nested too deeply" in first["fallback"] and len(first["response"]) == 4  # 3 attempts + fallback
    assert r.rounds[1].mapping == GOOD_MAP


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://[::1", "llm base_url is not a valid URL: 'http://[::1' (Invalid IPv6 URL)"),
        ("http://h:99999/v1", "llm base_url is not a valid URL: 'http://h:99999/v1' (Port out of range 0-65535)"),
        (
            "ftp://host/v1",
            "llm base_url must be an http:// or https:// URL with a host "
            "(or gguf:/path/to/model.gguf), got 'ftp://host/v1'",
        ),
        (
            "localhost:8000",
            "llm base_url must be an http:// or https:// URL with a host "
            "(or gguf:/path/to/model.gguf), got 'localhost:8000'",
        ),
        (
            "http:///v1",
            "llm base_url must be an http:// or https:// URL with a host "
            "(or gguf:/path/to/model.gguf), got 'http:///v1'",
        ),
    ],
)
def test_config_rejects_bad_urls(url, message):
    with pytest.raises(PolicyError) as e:
        LLMConfig.from_options({"base_url": url, "model": "m"}, {})
    assert str(e.value) == message
    assert (
        LLMConfig.from_options({"base_url": "HTTPS://api.example.com/v1/", "model": "m"}, {}).base_url
        == "HTTPS://api.example.com/v1"
    )


def test_cli_env_base_url_is_checked_in_one_line(cli, monkeypatch):
    monkeypatch.setenv("AGENTSCHED_LLM_BASE_URL", "http://[::1")
    code, out, err = cli("run", "S1", "-p", "agent-llm", "--llm-model", "m", "--rounds", "1", "--repeats", "1")
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: AGENTSCHED_LLM_BASE_URL is not a valid URL: 'http://[::1' (Invalid IPv6 URL)"]
