"""The agent as a loop policy: registry construction, labels, evidence, the ablation and the CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentsched.agent.local_llm import require_llama_cpp
from agentsched.agent.policy import AgentPolicy
from agentsched.errors import AgentschedError, PolicyError
from agentsched.experiments.ablation import VARIANTS, run_ablation
from agentsched.loop.runner import run_loop
from agentsched.scenarios import load_scenario
from tests.support.scripted_testbed import ScriptedTestbed, workflow


def test_registry_builds_the_agent_with_options():
    from agentsched.loop.registry import make_policy

    p = make_policy("agent-rules", start="cold", monitor={"hints": False, "probe_budget": 10})
    assert isinstance(p, AgentPolicy) and p.start == "cold"
    assert p.label == "agent-rules-cold[no-hints]"
    assert make_policy("agent-rules").label == "agent-rules"
    assert make_policy("agent-rules", monitor={"enabled": False}).label == "agent-rules[no-monitor]"
    p = make_policy("agent-llm", llm={"base_url": "http://127.0.0.1:9/v1", "model": "qwen"}, start="cold")
    assert p.label == "agent-llm:qwen-cold"


def test_unknown_options_are_one_line_policy_errors():
    from agentsched.loop.registry import make_policy

    with pytest.raises(
        PolicyError,
        match=r"^policy agent-rules takes no option 'temperature' \(options: initial, "
        r"monitor, stability, start\)$",
    ):
        make_policy("agent-rules", temperature=0.1)
    with pytest.raises(TypeError):  # explicit keyword arguments: Python itself refuses an unknown one
        AgentPolicy("rules", temperature=0.1)
    with pytest.raises(PolicyError, match="llm options must be a mapping"):
        AgentPolicy("llm", llm="http://x")
    with pytest.raises(PolicyError, match="unknown agent reasoner"):
        AgentPolicy("magic")
    with pytest.raises(PolicyError, match="warm or cold"):
        AgentPolicy("rules", start="hot")
    with pytest.raises(PolicyError, match="unknown monitor option"):
        AgentPolicy("rules", monitor={"swap": False})
    with pytest.raises(PolicyError, match="only valid with the llm reasoner"):
        AgentPolicy("rules", llm={"model": "x"})


def test_observe_returns_json_evidence_with_summary_and_counts_probes():
    wf = workflow(budget_mb=800)
    tb = ScriptedTestbed(slowdown=1.5)
    run = run_loop(wf, AgentPolicy("rules"), tb, rounds=5, repeats=2)
    for rec in run.records:
        ev = json.loads(json.dumps(rec.evidence))
        assert isinstance(ev["summary"], list) and all(isinstance(s, str) for s in ev["summary"])
        assert rec.proposal_info["reasoner"] == "rules" and rec.proposal_info["reason"]
        assert len(rec.probes) == ev["probes"]  # every probe went through ctx.probe
    # every execution (rounds and probes) is one testbed call, and the runner counted them all
    assert run.executions_total == len(tb.calls) == 5 * 2 + run.probes_total
    assert run.probes_total > 0


def test_ablation_table_has_the_papers_rows():
    res = run_ablation(load_scenario("S13"), rounds=4, repeats=1, seeds=(0,), start="cold")
    assert [t.initial for t in res.tables] == ["rules", "all-gpu"]
    assert [v.variant.key for v in res.tables[1].variants] == [v.key for v in VARIANTS]
    md = res.to_markdown()
    for label, paper in (("full system", "1529"), ("w/o swap reprobe", "2174"), ("reasoner only, no monitor", "OOM")):
        row = next(line for line in md.splitlines() if line.startswith(f"| {label} |"))
        assert row.rstrip(" |").endswith(paper)
    d = json.loads(json.dumps(res.to_dict()))
    rows = d["tables"][1]["variants"]
    assert rows[4]["policy"] == "agent-rules-cold[no-monitor,r0=all-gpu]"
    assert rows[4]["runs"][0]["probes"] == 0  # no monitor: no probes
    assert rows[0]["runs"][0]["probes"] > 0


def test_cli_ablation_writes_json(cli, tmp_path):
    out = tmp_path / "abl.json"
    code, text, err = cli("ablation", "S13", "--rounds", "3", "--seeds", "1", "--repeats", "1", "--json-out", str(out))
    assert code == 0, err
    assert "| full system |" in text and json.loads(out.read_text())["workflow"] == "S13"
    code, _, err = cli("ablation", "S13", "--start", "hot")
    assert code == 2 and err.strip() == (
        "error: Invalid value for '--start': 'hot' is not one of 'warm', 'cold'. (see 'agentsched ablation --help')"
    )


def test_cli_prompt_and_agent_check(cli):
    code, text, _ = cli("prompt", "S5", "--start", "cold")
    assert code == 0 and "[system]" in text and "Tools (cold start: no profiles)" in text
    code, text, err = cli("agent-check", "S1", "--seeds", "1", "--rounds", "3", "--baseline", "none")
    assert code == 0, err
    assert "| S1 | 1/1 (1/1) | R0 |" in text


def test_local_llm_extra_absence_is_one_line():
    if importlib.util.find_spec("llama_cpp") is not None:
        pytest.skip("llama-cpp-python is installed")
    with pytest.raises(AgentschedError, match=r"pip install 'agentsched\[local-llm\]'"):
        require_llama_cpp()
    with pytest.raises(AgentschedError, match="local-llm extra"):
        AgentPolicy("llm", llm={"base_url": "gguf:/models/tiny.gguf"})


def test_ablation_of_another_workflow_has_no_paper_columns(cli, tmp_path):
    out = tmp_path / "abl.json"
    code, text, err = cli(
        "ablation",
        "S1",
        "--rounds",
        "2",
        "--seeds",
        "1",
        "--repeats",
        "1",
        "--initial",
        "rules",
        "--json-out",
        str(out),
    )
    assert code == 0, err
    head = next(line for line in text.splitlines() if line.startswith("| variant |"))
    assert "paper" not in head and "| executions (mean) |" in head
    assert "1529" not in text and "Paper: Table 6 ablates S13 only; no paper figures for S1." in text
    assert json.loads(out.read_text())["paper"] == {}
    code, text, err = cli("ablation", "S13", "--rounds", "2", "--seeds", "1", "--repeats", "1", "--initial", "rules")
    assert code == 0, err
    head = next(line for line in text.splitlines() if line.startswith("| variant |"))
    assert head.endswith("| paper best match | paper best E2E ms |")


def test_ablation_json_path_is_checked_before_the_work(cli, monkeypatch, tmp_path):
    import agentsched.experiments.ablation as ablation

    def no_work(*a, **k):
        raise AssertionError("the ablation ran before its --json path was checked")

    monkeypatch.setattr(ablation, "run_ablation", no_work)
    code, out, err = cli("ablation", "S13", "--json-out", str(tmp_path / "missing" / "a.json"))
    assert code != 0 and out == ""
    assert err.splitlines() == [f"error: --json-out: folder {tmp_path / 'missing'} does not exist"]
    if Path("/proc").is_dir():
        code, out, err = cli("ablation", "S13", "--json-out", "/proc/x.json")
        assert code != 0 and out == ""
        assert len(err.splitlines()) == 1 and err.startswith("error: --json-out: cannot write /proc/x.json: ")
    code, out, err = cli("agent-check", "S1", "--json-out", str(tmp_path))
    assert code != 0 and err.splitlines() == [f"error: --json-out: {tmp_path} is a folder"]
