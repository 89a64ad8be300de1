"""Secrets never leave: URL credentials and the API key are masked in every message, log line,
exception text, audit record and JSON file, whichever path the text takes (issue 13 item 2)."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from agentsched.agent.llm import LLMConfig, LLMReasoner
from agentsched.agent.local_llm import error_body
from agentsched.agent.policy import AgentPolicy
from agentsched.agent.secrets import redact, redact_options, url_secrets
from agentsched.errors import PolicyError
from agentsched.loop.runner import run_loop
from agentsched.masking import redact_url
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed

KEY = "sk-live-0123456789abcdef"
PASSWORD = "hunter2-SECRET"


def quote_the_key(body, script):
    """What some servers do: an error body that quotes the key (and the URL) they were given."""
    return 401, error_body(
        f"Incorrect API key provided: {KEY}. Basic auth bob:{PASSWORD} refused.", "authentication_error"
    )


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://bob:{PASSWORD}@")


def assert_clean(text: str) -> None:
    assert KEY not in text and PASSWORD not in text


# ---- the function ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, secrets, expected",
    [
        ("http://user:SECRET@host/v1", (), "http://***@host/v1"),
        ("https://TOKEN@host:8443/v1 and http://a:b@c/d", (), "https://***@host:8443/v1 and http://***@c/d"),
        ("see 'http://u:p%40ss@h/v1'", (), "see 'http://***@h/v1'"),
        ("http://host/v1 has no credentials; mail a@b.c", (), "http://host/v1 has no credentials; mail a@b.c"),
        (f"bad key {KEY}!", (KEY,), "bad key ***!"),
        ("key k in the text", ("k",), "key k in the text"),  # too short to search for
        ("EMPTY is the local placeholder", ("EMPTY",), "EMPTY is the local placeholder"),
        ("ab sk-1234 sk-12345", ("sk-1234", "sk-12345"), "ab *** ***"),  # the longer one masked whole
        # an '@' in the password: before, its end after the '@' showed (http://***@ret@h)
        ("LLM endpoint http://user:s3c@ret@h:9/v1 is down", (), "LLM endpoint http://***@h:9/v1 is down"),
        # no scheme (a URL given without one, quoted back): before, shown whole
        ("got 'user:s3cret@127.0.0.1:9'", (), "got '***@127.0.0.1:9'"),
        (
            "cannot reach the service at user:s3c@ret@[::1]:9: refused",
            (),
            "cannot reach the service at ***@[::1]:9: refused",
        ),
        ("at 10:30 @home; mail a@b.c; a=b:c", (), "at 10:30 @home; mail a@b.c; a=b:c"),  # not credentials
        # an option quoted back in an error: the value written after a secret key, whatever its quoting
        ('llm={"api_key":"sk-LEAK","model":"m"}', (), 'llm={"api_key":***,"model":"m"}'),
        ("{'api_key': 'sk a b', 'n': 1} api_key=sk-x y", (), "{'api_key': ***, 'n': 1} api_key=*** y"),
        ("the api_key option is missing", (), "the api_key option is missing"),
        # a key in the URL's query (Google's ?key=, Azure's ?api-key=, a header name, a signed URL's sig):
        # before, shown whole in errors and in run/bench JSON
        ("endpoint http://h:9/v1?key=K2SECRET is down", (), "endpoint http://h:9/v1?key=*** is down"),
        (
            "http://h/v1?api-version=2&api-key=K2&x-api-key=K3#f",
            (),
            "http://h/v1?api-version=2&api-key=***&x-api-key=***#f",
        ),
        ("https://b/x?sv=1&sig=abc%2Fd&se=2 and x-api-key: K4", (), "https://b/x?sv=1&sig=***&se=2 and x-api-key: ***"),
        # a name that only holds a keyword is not a secret's (before: max_tokens' value was masked everywhere)
        (
            "http://h/v1?keyboard=1&monkey=2&max_tokens=2048&design=blue",
            (),
            "http://h/v1?keyboard=1&monkey=2&max_tokens=2048&design=blue",
        ),
        (
            "retry (http://h/v1?key=abc, then ?access_token=t)",
            (),
            "retry (http://h/v1?key=***, then ?access_token=***)",
        ),
    ],
)
def test_redact(text, secrets, expected):
    assert redact(text, secrets) == expected


def test_url_secrets_and_redact_url():
    # the Basic-auth token a client sends (base64 of "bob:p@ss"), and of the text as written
    assert url_secrets("http://bob:p%40ss@h/v1") == ("bob", "p%40ss", "p@ss", "Ym9iOnBAc3M=", "Ym9iOnAlNDBzcw==")
    assert url_secrets("http://h/v1") == ()
    assert url_secrets("http://h/v1?api-key=a%2Fb") == ("a%2Fb", "a/b")  # a server may echo it decoded
    assert url_secrets("user:s3c@ret@127.0.0.1:9")[:2] == ("user", "s3c@ret")  # no scheme, an '@' in the password
    assert redact_url("gguf:/models/x.gguf") == "gguf:/models/x.gguf"


def test_keys_in_a_code_parameter_a_path_or_a_fragment_are_masked():
    """A trial saw ``?code=`` (Azure Functions' key), ``/key/SECRET/`` and a fragment printed in full."""
    url = "http://h:9/key/PATHSECRET5/v1?code=AZFUNCSECRET&status_code=500#FRAGSECRET6"
    assert redact_url(url) == "http://h:9/key/***/v1?code=***&status_code=500#FRAGSECRET6"
    assert url_secrets(url) == ("AZFUNCSECRET", "PATHSECRET5")
    c = LLMConfig.from_options({"base_url": url, "model": "m"}, {})
    assert c.safe_url == "http://h:9/key/***/v1?code=***&status_code=500#***"  # an endpoint's fragment: never sent
    # only web URLs' paths: a file path names its file; and a placeholder key equal to the host hides nothing
    for plain in (
        "https://api.example.com/v1/monkey/pig",
        "see /key/x",
        "https://h/v1/keys/list",
        "FileNotFoundError: /home/u/proj/token/vocab.txt",
        "s3://bucket/datasets/key/part-0001.parquet",
    ):
        assert redact_url(plain) == plain
    ollama = LLMConfig.from_options({"base_url": "http://ollama:11434/v1", "model": "m", "api_key": "ollama"}, {})
    assert ollama.safe_url == "http://ollama:11434/v1"


def test_redact_options_masks_keys_and_urls_in_a_tree():
    opts = {
        "agent-llm": {
            "llm": {
                "base_url": with_credentials("http://h/v1"),
                "api_key": KEY,
                "model": "m",
                "note": f"uses {PASSWORD}",
            }
        },
        "heft": {"cpu_cores": 4},
    }
    out = redact_options(opts)
    assert out == {
        "agent-llm": {"llm": {"base_url": "http://***@h/v1", "api_key": "***", "model": "m", "note": "uses ***"}},
        "heft": {"cpu_cores": 4},
    }
    assert opts["agent-llm"]["llm"]["api_key"] == KEY  # a copy


# ---- every path -----------------------------------------------------------------------------------
def test_config_errors_and_reports_hide_url_credentials():
    with pytest.raises(PolicyError) as e:
        LLMConfig.from_options({"base_url": f"http://bob:{PASSWORD}@[::1", "model": "m"}, {})
    assert str(e.value) == "llm base_url is not a valid URL: 'http://***@[::1' (Invalid IPv6 URL)"
    with pytest.raises(PolicyError) as e:
        LLMConfig.from_options({"base_url": f"ftp://bob:{PASSWORD}@h/v1", "model": "m"}, {})
    assert_clean(str(e.value))
    c = LLMConfig.from_options({"base_url": f"http://bob:{PASSWORD}@h/v1", "model": "m", "api_key": KEY}, {})
    assert c.to_dict()["base_url"] == "http://***@h/v1" and "api_key" not in c.to_dict()
    assert_clean(json.dumps(AgentPolicy("llm", llm={"base_url": c.base_url, "model": "m", "api_key": KEY}).describe()))


@pytest.mark.parametrize(
    "options, message",
    [
        # the key given in the options, quoted back in another value's error (a URL's query, a number)
        (
            {"base_url": f"ftp://h/v1?key={KEY}", "model": "m", "api_key": KEY},
            "llm base_url must be an http:// or https:// URL with a host (or gguf:/path/to/model.gguf), got 'ftp://h/v1?key=***'",
        ),
        (
            {"base_url": "http://h:9/v1", "model": "m", "api_key": KEY, "timeout_s": KEY},
            "llm timeout_s must be a number, got '***'",
        ),
        (
            {"base_url": f"http://bob:{PASSWORD}@h/v1", "model": "m", "max_tokens": f"x{PASSWORD}"},
            "llm max_tokens must be an integer, got 'x***'",
        ),
    ],
)
def test_a_config_error_never_quotes_a_secret_given_beside_it(options, message):
    with pytest.raises(PolicyError) as e:
        LLMConfig.from_options(options, {})
    assert str(e.value) == message


def test_llm_options_that_are_not_a_mapping_are_not_quoted():
    """A URL with credentials (or a key) given where the mapping goes: the API's error names its type only."""
    with pytest.raises(PolicyError) as e:
        AgentPolicy("llm", llm=f"http://bob:{PASSWORD}@127.0.0.1:9/v1")
    assert str(e.value) == (
        "agent llm options must be a mapping of LLM settings (base_url, model, api_key, ...), "
        "got text, not a JSON object"
    )
    with pytest.raises(PolicyError, match=r"got a list$"):
        AgentPolicy("llm", llm=[KEY])


def test_preflight_error_hides_the_key_the_server_quotes(serve):
    server, _ = serve(quote_the_key)
    url = with_credentials(server.base_url)
    with pytest.raises(PolicyError) as e:
        LLMReasoner(LLMConfig.from_options({"base_url": url, "model": "m", "api_key": KEY}, {})).preflight()
    msg = str(e.value)
    assert_clean(msg)
    assert msg == (
        f"LLM endpoint {server.base_url.replace('http://', 'http://***@')} is not usable: "
        "HTTP 401: Incorrect API key provided: ***. Basic auth bob:*** refused."
    )


def test_round_audit_and_logs_hide_secrets(serve, caplog):
    server, _ = serve(quote_the_key)
    caplog.set_level(logging.DEBUG, logger="agentsched")
    policy = AgentPolicy("llm", llm={"base_url": with_credentials(server.base_url), "model": "m", "api_key": KEY})
    wf = load_scenario("S1")
    run = run_loop(wf, policy, SimTestbed(seed=0), rounds=2, repeats=1)
    audit = json.dumps([rec.proposal_info for rec in run.records])
    assert_clean(audit)
    assert "Incorrect API key provided: ***" in audit  # the message is kept, the key is not
    assert run.records[0].proposal_info["base_url"] == server.base_url.replace("http://", "http://***@")
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert "circuit open" in logs
    assert_clean(logs)


def test_cli_error_line_and_run_json_hide_secrets(cli, serve, tmp_path, monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        f"http://bob:{PASSWORD}@127.0.0.1:{port}/v1",
        "--llm-model",
        "m",
        "--llm-api-key",
        KEY,
        "--rounds",
        "1",
        "--repeats",
        "1",
    )
    assert (
        code != 0 and err == f"error: LLM endpoint http://***@127.0.0.1:{port}/v1 is not usable: connection refused\n"
    )
    # the key from the environment, a server that quotes it: the CLI's error line masks it too
    server, _ = serve(quote_the_key)
    monkeypatch.setenv("AGENTSCHED_LLM_API_KEY", KEY)
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        with_credentials(server.base_url),
        "--llm-model",
        "m",
        "--rounds",
        "1",
        "--repeats",
        "1",
    )
    assert code != 0 and "Incorrect API key provided: ***" in err
    assert_clean(err)
    # a run that goes through: its JSON records the model and the redacted URL, never a secret
    good = '{"mapping": {"A": "gpu", "B": "gpu", "C": "gpu", "D": "gpu"}, "reason": "r"}'
    server, _ = serve(good)
    path = tmp_path / "run.json"
    code, out, err = cli(
        "run",
        "S1",
        "-p",
        "agent-llm",
        "--llm-base-url",
        with_credentials(server.base_url),
        "--llm-model",
        "tiny",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--json-out",
        str(path),
    )
    assert code == 0, err
    text = path.read_text()
    assert_clean(text + out + err)
    reasoner = json.loads(text)["policy_info"]["reasoner"]
    assert reasoner["model"] == "tiny" and reasoner["base_url"] == server.base_url.replace("http://", "http://***@")
    assert reasoner["fallback"]["name"] == "rules"


def test_bench_results_json_hides_secrets_and_records_the_model(serve):
    from agentsched.experiments.bench import BenchConfig, run_bench
    from agentsched.experiments.results import results_dict

    server, _ = serve('{"mapping": {"A": "gpu", "B": "gpu", "C": "gpu", "D": "gpu"}, "reason": "r"}')
    config = BenchConfig(
        scenarios=("S1",),
        policies=("agent-llm",),
        rounds=2,
        repeats=1,
        seeds=(0,),
        policy_options={
            "agent-llm": {"llm": {"base_url": with_credentials(server.base_url), "model": "tiny", "api_key": KEY}}
        },
    )
    doc = results_dict(run_bench(config))
    assert_clean(json.dumps(doc))
    masked = server.base_url.replace("http://", "http://***@")
    assert doc["config"]["policy_options"]["agent-llm"]["llm"] == {
        "base_url": masked,
        "model": "tiny",
        "api_key": "***",
    }
    reasoner = doc["policy_info"]["agent-llm"]["reasoner"]
    assert reasoner["model"] == "tiny" and reasoner["base_url"] == masked
