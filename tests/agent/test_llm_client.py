"""The llm reasoner's HTTP bounds (issue 20, items 6-9; issue 21, item 1), against real loopback
HTTP servers on 127.0.0.1 (port 0): a whole-request deadline, answers that are not JSON, a cap on
the bytes read and on what the audit keeps, secrets an endpoint echoes, the completion cap."""

from __future__ import annotations

import base64
import json

import pytest

from agentsched.agent.llm import LLMConfig, LLMReasoner
from agentsched.agent.llm.parse import EXCERPT_CHARS
from agentsched.agent.local_llm import completion
from agentsched.agent.policy import AgentPolicy
from agentsched.errors import PolicyError
from agentsched.loop.runner import run_loop
from tests.support.llm_servers import RawServer
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow

GOOD = '{"mapping": {"A": "gpu", "B": "gpu", "C": "cpu", "D": "gpu"}, "reason": "ratios"}'
GOOD_MAP = mapping("gpu gpu cpu gpu")
KEY = "sk-live-0123456789abcdef"
PASSWORD = "hunter2-SECRET"


def body(content: str = GOOD, pad: int = 0, **message) -> bytes:
    """A chat completion as bytes, padded with ``pad`` spaces (valid JSON either way)."""
    doc = completion(content, "m")
    doc["choices"][0]["message"].update(message)
    return json.dumps(doc).encode() + b" " * pad


def run(url, rounds=1, **llm):
    policy = AgentPolicy("llm", llm={"base_url": url, "model": "m", "timeout_s": 10.0, "breaker_rounds": 0, **llm})
    return run_loop(workflow("binary", None), policy, ScriptedTestbed(), rounds=rounds, repeats=1)


def reasoner(url, **options):
    return LLMReasoner(
        LLMConfig.from_options({"base_url": url, "model": "m", "timeout_s": 10.0, **options}, {}),
        sleep=lambda s: None,
        notify=lambda line: None,
    )


# ---- item 6: a whole-request deadline -----------------------------------------------------------------
@pytest.mark.parametrize("trickle_headers", [False, True], ids=["body", "status-line-and-headers"])
def test_a_trickling_endpoint_times_out_at_the_deadline(trickle_headers):
    # one byte every 0.1 s: each read is far inside the 1 s timeout, the whole answer takes minutes;
    # without a whole-request deadline the round would wait for it and then use the valid answer
    with RawServer(lambda h: (200, body(pad=3000)), trickle_s=0.1, trickle_headers=trickle_headers) as server:
        r = run(server.base_url, timeout_s=1.0)
    info = r.records[0].proposal_info
    assert info["fallback"].startswith("endpoint timed out after 1 s; falling back to the rules reasoner")
    assert info["response"][0]["error"] == "endpoint timed out after 1 s"


def test_preflight_of_a_trickling_endpoint_times_out_in_one_line(cli):
    with RawServer(lambda h: (200, body(pad=3000)), trickle_s=0.1) as server:
        code, out, err = cli(
            "run",
            "S1",
            "-p",
            "agent-llm",
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "m",
            "--llm-timeout",
            "1",
            "--rounds",
            "1",
            "--repeats",
            "1",
        )
    assert code != 0 and out == ""
    assert err.splitlines() == [f"error: LLM endpoint {server.base_url} is not usable: no answer within 1 s"]


# ---- item 7: a 200 answer that is not JSON --------------------------------------------------------------
def test_a_200_answer_that_is_not_json_is_an_unusable_round():
    with RawServer(lambda h: (200, b'{"choices": [ this is not json')) as server:
        r = run(server.base_url, rounds=2)
    assert len(r.records) == 2  # the run went on: the rules decided both rounds
    for rec in r.records:
        assert rec.proposal_info["fallback"].startswith("unusable response: the answer is not JSON (")
        assert rec.proposal_info["fallback_reasoner"] == "rules"
    assert "circuit_open" not in r.records[1].proposal_info  # a garbled answer is not a dead endpoint


def test_preflight_of_an_answer_that_is_not_json_is_one_line(cli):
    with RawServer(lambda h: (200, b"<html>gateway</html>")) as server:
        with pytest.raises(PolicyError) as e:
            reasoner(server.base_url).preflight()
        assert str(e.value).startswith(f"LLM endpoint {server.base_url} is not usable: the answer is not JSON (")
        code, out, err = cli(
            "run",
            "S1",
            "-p",
            "agent-llm",
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "m",
            "--rounds",
            "1",
            "--repeats",
            "1",
        )
    assert code != 0 and len(err.splitlines()) == 1 and "not JSON" in err and "Traceback" not in err


# ---- item 8: responses capped, the audit trimmed --------------------------------------------------------
@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "read-until-close"])
def test_a_response_over_the_cap_is_not_read_and_is_an_unusable_round(content_length):
    huge = body(pad=3 << 20)  # 3 MiB of valid JSON
    with RawServer(lambda h: (200, huge), content_length=content_length) as server:
        r = run(server.base_url)
    info = r.records[0].proposal_info
    assert info["fallback"].startswith("unusable response: the answer is larger than 1 MiB (llm max_response_bytes)")
    assert len(json.dumps(info)) < 100_000


def test_the_audit_keeps_a_bounded_excerpt_of_a_long_answer():
    long = "x" * 200_000 + "\n" + GOOD  # under the byte cap: used, but not stored whole
    with RawServer(lambda h: (200, body(long, reasoning_content="r" * 200_000))) as server:
        r = run(server.base_url)
    assert r.rounds[0].mapping == GOOD_MAP
    first = r.records[0].proposal_info["response"][0]
    assert first["content_chars"] == len(long) and len(first["content"]) < EXCERPT_CHARS + 100
    assert first["content"].endswith(GOOD) and "characters cut" in first["content"]
    assert len(first["reasoning"]) < EXCERPT_CHARS + 100


def test_max_response_bytes_is_an_option_with_a_floor():
    with pytest.raises(PolicyError, match="llm max_response_bytes must be >= 1024, got 10"):
        LLMConfig.from_options({"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_response_bytes": 10}, {})


# ---- item 9: redaction of echoed secrets ----------------------------------------------------------------
def test_a_key_echoed_in_content_and_reasoning_never_reaches_the_audit_or_json_out(cli, tmp_path):
    def echo(handler):
        auth = handler.headers.get("Authorization", "")
        text = f"your key is {KEY}, your header {auth}. " + GOOD
        return 200, body(text, reasoning_content=f"I saw {KEY} and {auth}")

    with RawServer(echo) as server:
        url = server.base_url.replace("http://", f"http://bob:{PASSWORD}@")
        out_file = tmp_path / "run.json"
        code, out, err = cli(
            "run",
            "S1",
            "-p",
            "agent-llm",
            "--llm-base-url",
            url,
            "--llm-model",
            "m",
            "--llm-api-key",
            KEY,
            "--rounds",
            "2",
            "--repeats",
            "1",
            "--json-out",
            str(out_file),
        )
        sent = server.requests[-1][2]["Authorization"]
    assert code == 0, err
    token = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    assert sent == f"Basic {token}"  # URL credentials go out as Basic auth, as before
    text = out_file.read_text() + out + err
    for secret in (KEY, PASSWORD, token):
        assert secret not in text
    assert "your key is ***, your header Basic ***." in text and "I saw *** and Basic ***" in text


def test_the_bearer_key_is_sent_without_url_credentials():
    with RawServer(lambda h: (200, body())) as server:
        run(server.base_url, api_key=KEY)
        assert server.requests[0][2]["Authorization"] == f"Bearer {KEY}"


# ---- issue 21 item 1: the completion cap ----------------------------------------------------------------
def test_max_tokens_is_always_sent_512_by_default(serve):
    server, _ = serve(GOOD)
    run(server.base_url)
    assert server.requests[0]["max_tokens"] == 512
    run(server.base_url, max_tokens=64)
    assert server.requests[-1]["max_tokens"] == 64
    c = LLMConfig.from_options(
        {}, {"AGENTSCHED_LLM_BASE_URL": "http://h/v1", "AGENTSCHED_LLM_MODEL": "m", "AGENTSCHED_LLM_MAX_TOKENS": "200"}
    )
    assert c.max_tokens == 200
    with pytest.raises(PolicyError, match="AGENTSCHED_LLM_MAX_TOKENS must be >= 1, got 0"):
        LLMConfig.from_options(
            {},
            {"AGENTSCHED_LLM_BASE_URL": "http://h/v1", "AGENTSCHED_LLM_MODEL": "m", "AGENTSCHED_LLM_MAX_TOKENS": "0"},
        )


def test_an_answer_cut_at_the_cap_is_an_unusable_round(serve):
    cut = '{"mapping": {"A": "gpu", "B": "gp'
    server, script = serve(lambda b, s: (200, completion(cut, "m", finish_reason="length")), GOOD)
    r = run(server.base_url, rounds=2, max_tokens=16)
    info = r.records[0].proposal_info
    assert info["fallback"].startswith(
        "unusable response: the answer was cut at the completion cap "
        "(max_tokens 16, finish_reason length): raise --llm-max-tokens;"
    )
    assert len(info["response"]) == 2 and info["response"][0]["content"] == cut  # not re-asked; audited
    assert r.rounds[1].mapping == GOOD_MAP and "circuit_open" not in r.records[1].proposal_info


def test_a_server_that_wants_max_completion_tokens_gets_the_cap_under_that_name(serve):
    def o_series(body, script):  # OpenAI's reasoning models
        if "max_tokens" in body:
            return 400, {
                "error": {
                    "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead."
                }
            }
        return 200, completion(GOOD, "m")

    server, _ = serve(o_series)
    r = run(server.base_url, rounds=2)
    assert [x.mapping for x in r.rounds] == [GOOD_MAP, GOOD_MAP]
    sent = [
        (b.get("max_tokens"), b.get("max_completion_tokens"), b["response_format"]["type"]) for b in server.requests
    ]
    assert sent == [(512, None, "json_schema"), (None, 512, "json_schema"), (None, 512, "json_schema")]


def test_cli_llm_max_tokens(cli, serve):
    server, _ = serve(GOOD)
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        server.base_url,
        "--llm-model",
        "m",
        "--llm-max-tokens",
        "48",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--no-oracle",
    )
    assert code == 0, err
    assert server.requests[-1]["max_tokens"] == 48
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        server.base_url,
        "--llm-model",
        "m",
        "--llm-max-tokens",
        "0",
        "--rounds",
        "1",
        "--repeats",
        "1",
    )
    assert code != 0 and err.splitlines() == ["error: --llm-max-tokens must be >= 1, got 0"]
    code, out, err = cli("run", "S1", "-p", "heft", "--llm-max-tokens", "48", "--rounds", "1", "--repeats", "1")
    assert code != 0 and err.splitlines() == ["error: --llm-max-tokens applies only to --policy agent-llm (got heft)"]


def test_invoke_takes_the_llm_options_as_run_does(cli, tmp_path):
    """Before, invoke had no --llm-* options: only the AGENTSCHED_LLM_* variables reached agent-llm."""
    with RawServer(lambda h: (200, body())) as server:
        code, out, err = cli(
            "invoke",
            "S1",
            "--testbed",
            "sim",
            "-p",
            "agent-llm",
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "m",
            "--llm-api-key",
            KEY,
            "--store",
            str(tmp_path / "s.db"),
            "--json",
        )
        sent = server.requests[-1][2]["Authorization"]
    assert code == 0, err
    assert sent == f"Bearer {KEY}" and KEY not in out + err
    assert json.loads(out)["status"] == "ok"
    code, _, err = cli("invoke", "S1", "--testbed", "sim", "--llm-model", "m", "--store", str(tmp_path / "s.db"))
    assert code != 0 and err.splitlines() == ["error: --llm-model applies only to --policy agent-llm (got agent-plan)"]


def test_an_endpoint_root_with_a_query_gets_its_route_before_the_query():
    """Azure's roots carry ``?api-version=``: the route was appended after the query, so every
    request went to ``/v1?api-version=.../chat/completions`` and the endpoint answered 404."""
    from agentsched.agent.llm.client import with_route

    with RawServer(lambda h: (200, body())) as server:
        run(server.base_url + "/?api-version=2024-10-21")
        assert server.requests[0][1] == "/v1/chat/completions?api-version=2024-10-21"
    assert (
        with_route("https://h/openai/v1?api-version=1&x=2#frag", "/models")
        == "https://h/openai/v1/models?api-version=1&x=2"
    )
    assert with_route("http://h:8000/v1", "/chat/completions") == "http://h:8000/v1/chat/completions"
