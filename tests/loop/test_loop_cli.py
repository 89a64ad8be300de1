"""`agentsched run` and `agentsched bench`: output, --json, and one test per invalid argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsched.cli.main import main
from agentsched.policies import registry
from agentsched.policies.base import Policy, Proposal

TINY = str(Path(__file__).parent / "data" / "tiny.yaml")


def cli(argv, capsys):
    """(exit code, stdout, stderr) of the console entry point."""
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_prints_rounds_best_and_oracle_and_writes_json(tmp_path, capsys):
    f = tmp_path / "run.json"
    code, out, err = cli(["run", TINY, "--policy", "heft", "--rounds", "2", "--repeats", "1", "--noise", "0",
                          "--json", str(f)], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "R0   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 1"
    assert lines[2] == "R1   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 2"
    assert lines[3] == "best:   R0 A=gpu,B=cpu  E2E 10.0 ms, 1.000x oracle"
    assert lines[4] == "oracle: A=gpu,B=cpu  E2E 10.0 ms (noise-free)"
    assert lines[5] == ("match 2/2, first oracle-equivalent round R0, executions 2 (0 probes, 0 infeasible), "
                        "regret 0.000")
    doc = json.loads(f.read_text())
    assert [r["executions"] for r in doc["rounds"]] == [1, 2]
    assert doc["rounds"][0] == {"round": 0, "mapping": {"A": "gpu_now", "B": "cpu"}, "e2e_ms": 10.0,
                                "status": "ok", "executions": 1, "probes": 0, "peak_vram_mb": 100.0,
                                "message": "", "reference_e2e_ms": 10.0, "evidence": None}
    assert doc["best"] == {"round": 0, "mapping": {"A": "gpu_now", "B": "cpu"}, "e2e_ms": 10.0}
    assert doc["oracle"] == {"mapping": {"A": "gpu_now", "B": "cpu"}, "e2e_ms": 10.0}
    assert doc["metrics"]["regret"] == 0.0


class FakeAgent(Policy):
    """Stands in for the agent: evidence with a summary, prompt/response with each proposal."""

    name = "agent-rules"

    def __init__(self, **options):
        self.options = options

    def propose(self, round_index):
        return Proposal({"A": "gpu_now", "B": "cpu"}, {"prompt": f"p{round_index}", "response": "r"})

    def observe(self, result):
        self.ctx.probe({"A": "cpu", "B": "cpu"})
        return {"summary": ["line one", "line two"], "whatif": {"A->cpu": 100.0}}


def test_run_prints_evidence_summary_and_copies_prompt(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(registry, "_load_class", lambda spec: FakeAgent)
    f = tmp_path / "run.json"
    code, out, err = cli(["run", TINY, "-p", "agent-rules", "--start", "cold", "--rounds", "1", "--repeats", "1",
                          "--noise", "0", "--json", str(f)], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "R0   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 2 (1 probes)"
    assert lines[2:4] == ["      line one", "      line two"]
    r0 = json.loads(f.read_text())["rounds"][0]
    assert (r0["prompt"], r0["response"], r0["probes"], r0["executions"]) == ("p0", "r", 1, 2)
    assert r0["evidence"] == {"summary": ["line one", "line two"], "whatif": {"A->cpu": 100.0}}


@pytest.mark.parametrize("args,message", [
    (["--policy", "nope"], "error: unknown policy 'nope' (valid: all-gpu, heft, heft-cf, ucb1, starpu, mem-greedy, "
                           "oracle, agent-rules, agent-rules-cold, agent-llm)"),
    (["--policy", "heft", "--rounds", "0"], "error: --rounds must be >= 1, got 0"),
    (["--policy", "heft", "--repeats", "0"], "error: --repeats must be >= 1, got 0"),
    (["--policy", "heft", "--start", "lukewarm"], "error: --start must be warm or cold, got 'lukewarm'"),
    (["--policy", "heft", "--start", "cold"],
     "error: policy heft has no cold start (--start is for agent-rules, agent-llm)"),
    (["--policy", "heft", "--noise", "-1"], "error: --noise must be >= 0, got -1"),
    (["--policy", "heft", "--llm-model", "m"], "error: --llm-model only apply to --policy agent-llm (got heft)"),
    (["--policy", "agent-llm", "--llm-temperature", "-1"], "error: --llm-temperature must be >= 0, got -1"),
    (["--policy", "agent-llm", "--llm-timeout", "0"], "error: --llm-timeout must be > 0, got 0"),
    (["--policy", "heft", "--testbed", "gpu"], "error: unknown testbed 'gpu' (valid: sim, local)"),
    (["--policy", "heft", "--json", "/nonexistent-dir/x.json"],
     "error: --json: folder /nonexistent-dir does not exist"),
])
def test_run_invalid_arguments(args, message, capsys):
    code, out, err = cli(["run", TINY] + args, capsys)
    assert code != 0
    assert err.strip() == message


def test_run_unknown_workflow(capsys):
    code, out, err = cli(["run", "S99", "--policy", "heft"], capsys)
    assert code != 0
    assert err.startswith("error: 'S99' is neither a built-in scenario (S1, S2,")
    assert len(err.strip().splitlines()) == 1


def test_run_unknown_cards(capsys):
    code, out, err = cli(["run", TINY, "--policy", "heft", "--cards", "nocards"], capsys)
    assert code != 0
    assert err.startswith("error: card set 'nocards' is neither a built-in set (")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args,message", [
    (["--seeds", "0"], "error: --seeds must be >= 1, got 0"),
    (["--rounds", "0"], "error: --rounds must be >= 1, got 0"),
    (["--repeats", "0"], "error: --repeats must be >= 1, got 0"),
    (["--noise", "-0.5"], "error: --noise must be >= 0, got -0.5"),
    (["--policies", "heft,bogus"], "error: unknown policy 'bogus' (valid: all-gpu, heft, heft-cf, ucb1, starpu, "
                                   "mem-greedy, oracle, agent-rules, agent-rules-cold, agent-llm)"),
    (["--policies", "heft,heft"], "error: --policies names heft twice"),
    (["--policies", ","], "error: --policies is empty"),
    (["--scenarios", ","], "error: --scenarios is empty"),
    (["--policies", "heft", "--start", "cold"],
     "error: --start cold: none of the chosen policies has a start option (agent-rules, agent-llm do)"),
    (["--policies", "heft", "--start", "hot"], "error: --start must be warm or cold, got 'hot'"),
    (["--policies", "heft", "--llm-model", "m"], "error: --llm-model only apply when agent-llm is among --policies"),
    (["--policies", "heft", "--gantt", "S7"], "error: --gantt S7 is not among the benched scenarios (tiny)"),
])
def test_bench_invalid_arguments(args, message, capsys, tmp_path):
    code, out, err = cli(["bench", "--scenarios", TINY, "--out", str(tmp_path)] + args, capsys)
    assert code != 0
    assert err.strip() == message
    assert not (tmp_path / "results.json").exists()


def test_bench_unknown_scenario(capsys, tmp_path):
    code, out, err = cli(["bench", "--scenarios", "S1,S99", "--out", str(tmp_path)], capsys)
    assert code != 0
    assert err.startswith("error: 'S99' is neither a built-in scenario")
    assert len(err.strip().splitlines()) == 1


def test_bench_unknown_cards(capsys, tmp_path):
    code, out, err = cli(["bench", "--scenarios", "S1", "--cards", "nocards", "--out", str(tmp_path)], capsys)
    assert code != 0
    assert err.startswith("error: card set 'nocards' is neither a built-in set")


def test_bench_output_folder_that_is_a_file(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = cli(["bench", "--scenarios", TINY, "--policies", "heft", "--rounds", "1", "--repeats", "1",
                          "--seeds", "1", "--out", str(blocker / "out")], capsys)
    assert code != 0
    assert err.startswith(f"error: cannot create output folder {blocker / 'out'}")


def test_bench_writes_outputs_and_prints_the_summary(capsys, tmp_path):
    code, out, err = cli(["bench", "--scenarios", TINY, "--policies", "heft,oracle", "--rounds", "2", "--repeats",
                          "1", "--seeds", "2", "--noise", "0", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "Bench summary" in out
    assert "4 runs in" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["policies"] == ["heft", "oracle"] and doc["config"]["seeds"] == [0, 1]
    assert doc["config"]["ablation"] is False  # agent-rules did not run
    assert (tmp_path / "report.md").exists() and (tmp_path / "convergence.png").exists()


def test_bench_default_policies_skip_an_unavailable_agent(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "is_available", lambda name: False)
    code, out, err = cli(["bench", "--scenarios", TINY, "--rounds", "1", "--repeats", "1", "--seeds", "1",
                          "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "note: agent-rules skipped: agentsched.agent.policy is not importable" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["policies"] == ["all-gpu", "heft", "heft-cf", "ucb1", "starpu", "mem-greedy", "oracle"]


def test_bench_runs_the_agent_ablation_on_s13(capsys, tmp_path, monkeypatch):
    import sys
    import types

    calls = []

    class Result:
        def to_markdown(self):
            return "| variant | best |\n|---|---|\n| full | 4/4 |"

        def to_dict(self):
            return {"variants": {"full": "4/4"}}

    def run_ablation(workflow, *, rounds, repeats, seeds, start):
        calls.append((workflow.name, rounds, repeats, seeds, start))
        return Result()

    fake = types.ModuleType("agentsched.agent.ablation")
    fake.run_ablation = run_ablation
    monkeypatch.setitem(sys.modules, "agentsched.agent.ablation", fake)
    code, out, err = cli(["bench", "--scenarios", TINY, "--policies", "heft", "--rounds", "2", "--repeats", "1",
                          "--seeds", "2", "--ablation", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert calls == [("S13", 2, 1, [0, 1], "warm")]
    assert "## S13 ablation (agent)\n\n| variant | best |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["ablation"] == {"variants": {"full": "4/4"}}


def test_bench_ablation_import_failure_is_a_note(capsys, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "agentsched.agent.ablation", None)
    code, out, err = cli(["bench", "--scenarios", TINY, "--policies", "heft", "--rounds", "1", "--repeats", "1",
                          "--seeds", "1", "--ablation", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "note: ablation skipped: cannot import agentsched.agent.ablation" in out
    assert "ablation" not in json.loads((tmp_path / "results.json").read_text())


def test_run_without_an_oracle_for_a_large_workflow(tmp_path, capsys):
    import yaml

    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump({"name": "big", "cards": "a5500", "edges": [],
                                   "tasks": {f"T{i:02d}": "web_search" for i in range(13)}}))
    code, out, err = cli(["run", str(big), "-p", "heft", "--rounds", "1", "--repeats", "1"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == ("note: no oracle for big: brute force over 13 tasks is too large (limit 12); "
                                   "running without it")
    code, out, err = cli(["run", str(big), "-p", "oracle", "--rounds", "1", "--repeats", "1"], capsys)
    assert code != 0
    assert err.strip() == "error: no oracle for big: brute force over 13 tasks is too large (limit 12)"
