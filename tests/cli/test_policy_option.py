"""--policy-option KEY=VALUE on run, bench and invoke: what `agentsched policies` lists, settable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsched.cli.policy_opts import PolicyFlags, parse_item, policy_options
from agentsched.errors import AgentschedError

TINY = str(Path(__file__).parent.parent / "data" / "workflows" / "tiny.yaml")


@pytest.mark.parametrize(
    "item,parsed",
    [
        ("exploration=3", (None, "exploration", 3)),
        ("probe_fraction=0.25", (None, "probe_fraction", 0.25)),
        ("predictions=true", (None, "predictions", True)),
        ("start=cold", (None, "start", "cold")),
        ('monitor={"hints": false}', (None, "monitor", {"hints": False})),
        ("heft-cf.contention_factor=0.4", ("heft-cf", "contention_factor", 0.4)),
        ("UCB1.exploration = 1", ("ucb1", "exploration", 1)),
    ],
)
def test_items_parse_as_json_or_text(item, parsed):
    assert parse_item(item) == parsed


def test_an_option_goes_to_every_chosen_policy_that_takes_it():
    opts = policy_options(["heft", "heft-cf", "ucb1"], PolicyFlags(items=("machine=classical",)))
    assert opts == {"heft": {"machine": "classical"}, "heft-cf": {"machine": "classical"}}
    with pytest.raises(
        AgentschedError,
        match=r"^--policy-option cpu_cores: no such option \(valid: ucb1: "
        r"exploration\)$",
    ):
        policy_options(["ucb1"], PolicyFlags(items=("cpu_cores=2",)), single=True)


def test_run_sets_a_listed_option(cli):
    code, out, err = cli(
        "run",
        "S5",
        "-p",
        "agent-rules",
        "-O",
        'monitor={"enabled": false}',
        "-O",
        "initial=all-gpu",
        "--rounds",
        "2",
        "--repeats",
        "1",
    )
    assert code == 0, err
    assert "policy agent-rules[no-monitor,r0=all-gpu]," in out


def test_bench_records_the_options_it_set(cli, tmp_path):
    out = tmp_path / "b"
    code, _, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft-cf,ucb1",
        "--policy-option",
        "heft-cf.contention_factor=0.25",
        "-O",
        "exploration=0.5",
        "--seeds",
        "1",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--no-ablation",
        "--out",
        str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["policy_options"] == {"heft-cf": {"contention_factor": 0.25}, "ucb1": {"exploration": 0.5}}


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["run", "S5", "-p", "heft", "-O", "machine=serial"],
            "error: policy heft: machine must be one of parallel, classical, got 'serial'",
        ),
        (["run", "S5", "-p", "agent-plan", "-O", "probe_fraction=2"], None),
        (
            ["run", "S5", "-p", "agent-plan", "-O", "probes=2"],
            "error: --policy-option probes: no such option (valid: agent-plan: config, min_gain, probe_fraction, "
            "probes_per_round, start)",
        ),
        (
            ["bench", "--policies", "heft", "-O", "exploration=1"],
            "error: --policy-option exploration: no such option (valid: heft: cpu_cores, machine)",
        ),
        (
            ["invoke", "S5", "-p", "ucb1", "-O", "explore=1", "--store", "none.db"],
            "error: --policy-option explore: no such option (valid: ucb1: exploration)",
        ),
        # a prefix that is not a policy: a guess at nesting, not an option of some policy
        (
            ["bench", "--policies", "agent-rules", "-O", "monitor.hints=false"],
            "error: --policy-option monitor.hints=false: monitor is not a policy (POLICY.KEY=VALUE names one of the "
            "chosen policies: agent-rules)",
        ),
        (
            ["bench", "--policies", "ucb1", "-O", ".exploration=1"],
            "error: --policy-option '.exploration=1' is not POLICY.KEY=VALUE",
        ),
        # one policy's key set twice: the later item would silently replace the earlier one
        (
            ["bench", "--policies", "heft,heft-cf", "-O", "heft-cf.machine=parallel", "-O", "machine=classical"],
            "error: --policy-option machine=classical: machine of heft-cf is set by heft-cf.machine=parallel too; "
            "give it once",
        ),
        (
            ["run", "S5", "-p", "ucb1", "-O", "exploration=1", "-O", "ucb1.exploration=3"],
            "error: --policy-option ucb1.exploration=3: exploration of ucb1 is set by exploration=1 too; give it once",
        ),
        # the prefixed item is the bad one, not the bare 'exploration' ucb1 takes
        (
            ["bench", "--policies", "ucb1,heft", "-O", "exploration=2", "-O", "heft.exploration=1"],
            "error: --policy-option heft.exploration: no such option (valid: heft: cpu_cores, machine)",
        ),
        # --llm-* beside -O llm={...}: one set of settings, each field once (the flags used to drop the mapping)
        (
            [
                "run",
                "S5",
                "-p",
                "agent-llm",
                "--llm-model",
                "m",
                "-O",
                'llm={"base_url": "http://127.0.0.1:9/v1", "model": "x"}',
            ],
            'error: --policy-option llm={"base_url": "http://127.0.0.1:9/v1", "model": "x"}: llm model is given by '
            "--llm-model too; give it once",
        ),
        # a key in a JSON option is never echoed (the malformed JSON is quoted back as text)
        (
            ["run", "S5", "-p", "agent-llm", "-O", 'llm={"api_key": "sk-LEAKME123",}'],
            "error: agent llm options must be a mapping of LLM settings (base_url, model, api_key, ...), got text, not a "
            "JSON object",
        ),
        (
            [
                "run",
                "S5",
                "-p",
                "agent-llm",
                "-O",
                'llm={"api_key": "sk-LEAKME123", "base_url": "http://h:9/v1", "model": "m"}',
                "-O",
                "llm={}",
            ],
            'error: --policy-option llm={}: llm of agent-llm is set by llm={"api_key": ***, "base_url": "http://h:9/v1", '
            '"model": "m"} too; give it once',
        ),
        (
            [
                "run",
                "S5",
                "-p",
                "agent-llm",
                "-O",
                'llm={"api_key": 12345678, "base_url": "http://h:9/v1", "model": "m"}',
            ],
            "error: llm api_key must be a string, got int",
        ),
        (
            ["run", "S5", "-p", "agent-llm", "-O", 'llm={"model": ["a"], "base_url": "http://h:9/v1"}'],
            "error: llm model must be a string, got ['a']",
        ),
        (
            ["run", "S5", "--size", "huge"],
            "error: Invalid value for '--size': 'huge' is not one of 'paper', 'small'. (see 'agentsched run --help')",
        ),
    ],
)
def test_unknown_keys_and_bad_values_are_one_line(cli, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    if message is not None:
        assert lines[0] == message
    assert not (tmp_path / "none.db").exists()  # refused before the store is opened


def test_llm_flags_and_an_llm_mapping_make_one_config():
    """--llm-model beside -O llm={"base_url": ...}: both apply (before, the flags replaced the mapping
    whole and the endpoint was reported missing)."""
    opts = policy_options(
        ["agent-llm"],
        PolicyFlags(llm={"model": "m"}, items=('llm={"base_url": "http://127.0.0.1:9/v1", "temperature": 0}',)),
        single=True,
    )
    config = opts["agent-llm"]["llm"]
    assert (config.base_url, config.model, config.temperature) == ("http://127.0.0.1:9/v1", "m", 0.0)
