"""`agentsched run` and `agentsched bench`: output, --json, and one test per invalid argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsched.loop import registry
from agentsched.policies.base import Policy, Proposal

TINY = str(Path(__file__).parent.parent / "data" / "workflows" / "tiny.yaml")


def test_run_prints_rounds_best_and_oracle_and_writes_json(tmp_path, cli):
    f = tmp_path / "run.json"
    code, out, err = cli(
        "run", TINY, "--policy", "heft", "--rounds", "2", "--repeats", "1", "--noise", "0", "--json-out", str(f)
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "R0   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 1"
    assert lines[2] == "R1   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 2"
    assert lines[3] == "best:   R0 A=gpu,B=cpu  E2E 10.0 ms, 1.000x oracle"
    assert lines[4] == "oracle: A=gpu,B=cpu  E2E 10.0 ms (noise-free)"
    assert lines[5] == (
        "match 2/2, first oracle-equivalent round R0, executions 2 (0 probes, 0 infeasible), regret 0.000"
    )
    doc = json.loads(f.read_text())
    assert [r["executions"] for r in doc["rounds"]] == [1, 2]
    assert doc["rounds"][0] == {
        "round": 0,
        "mapping": {"A": "gpu_now", "B": "cpu"},
        "e2e_ms": 10.0,
        "status": "ok",
        "executions": 1,
        "probes": 0,
        "peak_vram_mb": 100.0,
        "message": "",
        "reference_e2e_ms": 10.0,
        "evidence": None,
    }
    assert doc["best"] == {"round": 0, "mapping": {"A": "gpu_now", "B": "cpu"}, "e2e_ms": 10.0}
    assert doc["oracle"] == {"mapping": {"A": "gpu_now", "B": "cpu"}, "e2e_ms": 10.0}
    assert doc["metrics"]["regret"] == 0.0


class FakeAgent(Policy):
    """Stands in for the agent: evidence with a summary, prompt/response with each proposal."""

    name = "agent-rules"

    def __init__(self, reasoner="rules", *, start=None, monitor=None):  # the registry reads these options
        self.options = {"reasoner": reasoner, "start": start, "monitor": monitor}

    def propose(self, round_index):
        return Proposal({"A": "gpu_now", "B": "cpu"}, {"prompt": f"p{round_index}", "response": "r"})

    def observe(self, result):
        self.ctx.probe({"A": "cpu", "B": "cpu"})
        return {"summary": ["line one", "line two"], "whatif": {"A->cpu": 100.0}}


def test_run_prints_evidence_summary_and_copies_prompt(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(registry, "_load_class", lambda spec: FakeAgent)
    f = tmp_path / "run.json"
    code, out, err = cli(
        "run",
        TINY,
        "-p",
        "agent-rules",
        "--start",
        "cold",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--noise",
        "0",
        "--json-out",
        str(f),
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "R0   A=gpu,B=cpu  E2E       10.0 ms  ok  executions 2 (1 probe)"
    assert lines[2:4] == ["      line one", "      line two"]
    r0 = json.loads(f.read_text())["rounds"][0]
    assert (r0["prompt"], r0["response"], r0["probes"], r0["executions"]) == ("p0", "r", 1, 2)
    assert r0["evidence"] == {"summary": ["line one", "line two"], "whatif": {"A->cpu": 100.0}}


LLM = [
    "--llm-base-url",
    "http://127.0.0.1:9/v1",
    "--llm-model",
    "m",
]  # an endpoint (never called: the error comes first)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--policy", "nope"],
            "error: unknown policy 'nope' (valid: all-gpu, heft, heft-cf, ucb1, starpu, mem-greedy, "
            "oracle, agent-rules, agent-rules-cold, agent-llm, agent-plan, agent-plan-cold)",
        ),
        (["--policy", "heft", "--rounds", "0"], "error: --rounds must be >= 1, got 0"),
        (["--policy", "heft", "--repeats", "0"], "error: --repeats must be >= 1, got 0"),
        (
            ["--policy", "heft", "--start", "lukewarm"],
            "error: Invalid value for '--start': 'lukewarm' is not one of "
            "'warm', 'cold'. (see 'agentsched run --help')",
        ),
        (
            ["--policy", "heft", "--start", "cold"],
            "error: policy heft has no cold start (--start is for agent-rules, agent-llm, agent-plan)",
        ),
        (["--policy", "heft", "--noise", "-1"], "error: --noise must be a number in [0, 1], got -1.0"),
        (["--policy", "heft", "--noise", "nan"], "error: --noise must be a number in [0, 1], got nan"),
        (["--policy", "heft", "--noise", "inf"], "error: --noise must be a number in [0, 1], got inf"),
        (["--policy", "heft", "--llm-model", "m"], "error: --llm-model applies only to --policy agent-llm (got heft)"),
        (
            ["--policy", "agent-rules", "--llm-predictions"],
            "error: --llm-predictions applies only to --policy agent-llm (got agent-rules)",
        ),
        (
            ["--policy", "heft", "--llm-model", "m", "--llm-timeout", "3"],
            "error: --llm-model, --llm-timeout apply only to --policy agent-llm (got heft)",
        ),
        (
            ["--policy", "agent-llm", *LLM, "--llm-temperature", "-1"],
            "error: --llm-temperature must be a finite number >= 0, got -1",
        ),
        (
            ["--policy", "agent-llm", *LLM, "--llm-temperature", "nan"],
            "error: --llm-temperature must be a finite number >= 0, got nan",
        ),
        (
            ["--policy", "agent-llm", *LLM, "--llm-timeout", "0"],
            "error: --llm-timeout must be a finite number > 0, got 0",
        ),
        (
            ["--policy", "agent-llm", *LLM, "--llm-timeout", "nan"],
            "error: --llm-timeout must be a finite number > 0, got nan",
        ),
        (
            ["--policy", "agent-llm", *LLM, "--llm-timeout", "inf"],
            "error: --llm-timeout must be a finite number > 0, got inf",
        ),
        (
            ["--policy", "heft", "--testbed", "gpu"],
            "error: Invalid value for '--testbed': 'gpu' is not one of 'sim', "
            "'local', 'ray'. (see 'agentsched run --help')",
        ),
        (
            ["--policy", "heft", "--world", "a5500", "--testbed", "local"],
            "error: --world applies only to the sim testbed (got local)",
        ),
        (
            ["--policy", "ucb1", "--policy-option", "explore=1"],
            "error: --policy-option explore: no such option (valid: ucb1: exploration)",
        ),
        (
            ["--policy", "ucb1", "--policy-option", "exploration=-1"],
            "error: policy ucb1: exploration must be a finite number >= 0, got -1",
        ),
        (
            ["--policy", "ucb1", "--policy-option", "exploration=lots"],
            "error: policy ucb1: exploration must be a finite number >= 0, got 'lots'",
        ),
        (
            ["--policy", "ucb1", "--policy-option", "exploration"],
            "error: --policy-option 'exploration' is not KEY=VALUE",
        ),
        (
            ["--policy", "agent-plan", "--start", "cold", "--policy-option", "start=warm"],
            "error: --policy-option start: --start sets it too; give it once",
        ),
        (
            ["--policy", "oracle", "--policy-option", "oracle=x"],
            "error: --policy-option oracle: no such option (valid: oracle: none)",
        ),
        (
            ["--policy", "heft", "--json-out", "/nonexistent-dir/x.json"],
            "error: --json-out: folder /nonexistent-dir does not exist",
        ),
    ],
)
def test_run_invalid_arguments(args, message, cli):
    code, out, err = cli(*["run", TINY] + args)
    assert code != 0
    assert err.strip() == message


def test_run_unknown_workflow(cli):
    code, out, err = cli("run", "S99", "--policy", "heft")
    assert code != 0
    assert err.startswith("error: 'S99' is neither a built-in scenario (S1, S2,")
    assert len(err.strip().splitlines()) == 1


def test_run_unknown_cards(cli):
    code, out, err = cli("run", TINY, "--policy", "heft", "--cards", "nocards")
    assert code != 0
    assert err.startswith("error: card set 'nocards' is neither a built-in set (")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["--seeds", "0"], "error: --seeds must be >= 1, got 0"),
        (["--rounds", "0"], "error: --rounds must be >= 1, got 0"),
        (["--repeats", "0"], "error: --repeats must be >= 1, got 0"),
        (["--noise", "-0.5"], "error: --noise must be a number in [0, 1], got -0.5"),
        (["--noise", "nan"], "error: --noise must be a number in [0, 1], got nan"),
        (
            ["--policies", "agent-llm", *LLM, "--llm-temperature", "nan"],
            "error: --llm-temperature must be a finite number >= 0, got nan",
        ),
        (
            ["--policies", "agent-llm", *LLM, "--llm-timeout", "inf"],
            "error: --llm-timeout must be a finite number > 0, got inf",
        ),
        (
            ["--policies", "heft", "--testbed", "gpu"],
            "error: Invalid value for '--testbed': 'gpu' is not one of 'sim', "
            "'local', 'ray'. (see 'agentsched bench --help')",
        ),
        (
            ["--policies", "heft,ucb1", "--policy-option", "exploration=1", "--policy-option", "factor=2"],
            "error: --policy-option factor: no such option (valid: heft: cpu_cores, machine; ucb1: exploration)",
        ),
        (
            ["--policies", "heft", "--policy-option", "ucb1.exploration=1"],
            "error: --policy-option ucb1.exploration=1: policy ucb1 is not among the chosen policies (heft)",
        ),
        (
            ["--policies", "heft,bogus"],
            "error: unknown policy 'bogus' (valid: all-gpu, heft, heft-cf, ucb1, starpu, "
            "mem-greedy, oracle, agent-rules, agent-rules-cold, agent-llm, agent-plan, agent-plan-cold)",
        ),
        (["--policies", "heft,heft"], "error: --policies names heft twice"),
        (["--policies", ","], "error: --policies is empty"),
        (["--scenarios", ","], "error: --scenarios is empty"),
        (
            ["--policies", "heft", "--start", "cold"],
            "error: --start cold: none of the chosen policies has a start option (agent-rules, agent-llm, agent-plan do)",
        ),
        (
            ["--policies", "heft", "--start", "hot"],
            "error: Invalid value for '--start': 'hot' is not one of 'warm', 'cold'. (see 'agentsched bench --help')",
        ),
        (
            ["--policies", "heft", "--llm-model", "m"],
            "error: --llm-model applies only when agent-llm is among --policies",
        ),
        (
            ["--policies", "heft", "--no-llm-predictions"],
            "error: --llm-predictions applies only when agent-llm is among --policies",
        ),
        (
            ["--policies", "heft", "--llm-model", "m", "--llm-base-url", "u"],
            "error: --llm-base-url, --llm-model apply only when agent-llm is among --policies",
        ),
        (["--policies", "heft", "--gantt", "S7"], "error: --gantt S7 is not among the benched scenarios (tiny)"),
    ],
)
def test_bench_invalid_arguments(args, message, cli, tmp_path):
    code, out, err = cli(*["bench", "--scenarios", TINY, "--out", str(tmp_path)] + args)
    assert code != 0
    assert err.strip() == message
    assert not (tmp_path / "results.json").exists()


def test_bench_unknown_scenario(cli, tmp_path):
    code, out, err = cli("bench", "--scenarios", "S1,S99", "--out", str(tmp_path))
    assert code != 0
    assert err.startswith("error: 'S99' is neither a built-in scenario")
    assert len(err.strip().splitlines()) == 1


def test_bench_unknown_cards(cli, tmp_path):
    code, out, err = cli("bench", "--scenarios", "S1", "--cards", "nocards", "--out", str(tmp_path))
    assert code != 0
    assert err.startswith("error: card set 'nocards' is neither a built-in set")


def test_bench_output_folder_that_is_a_file(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--out",
        str(blocker / "out"),
    )
    assert code != 0
    assert err.startswith(f"error: cannot create output folder {blocker / 'out'}")


def test_bench_writes_outputs_and_prints_the_summary(cli, tmp_path):
    code, out, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft,oracle",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--seeds",
        "2",
        "--noise",
        "0",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    assert "Bench summary" in out
    assert "4 runs in" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["policies"] == ["heft", "oracle"] and doc["config"]["seeds"] == [0, 1]
    assert doc["config"]["ablation"] is False  # agent-rules did not run
    assert (tmp_path / "report.md").exists() and (tmp_path / "convergence.png").exists()


def test_bench_default_policies_skip_an_unavailable_agent(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "is_available", lambda name: False)
    code, out, err = cli(
        "bench", "--scenarios", TINY, "--rounds", "1", "--repeats", "1", "--seeds", "1", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert "note: agent-rules skipped: agentsched.agent.policy is not importable" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["policies"] == ["all-gpu", "heft", "heft-cf", "ucb1", "starpu", "mem-greedy", "oracle"]


def test_bench_runs_the_agent_ablation_on_s13(cli, tmp_path, monkeypatch):
    import sys
    import types

    calls = []

    class Result:
        def to_markdown(self):
            return "| variant | best |\n|---|---|\n| full | 4/4 |"

        def to_dict(self):
            return {"variants": {"full": "4/4"}}

    def run_ablation(workflow, *, rounds, repeats, seeds, start, **_):
        calls.append((workflow.name, rounds, repeats, seeds, start))
        return Result()

    fake = types.ModuleType("agentsched.experiments.ablation")
    fake.run_ablation = run_ablation
    monkeypatch.setitem(sys.modules, "agentsched.experiments.ablation", fake)
    code, out, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--seeds",
        "2",
        "--ablation",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    assert calls == [("S13", 2, 1, [0, 1], "warm")]
    assert "## S13 ablation (agent)\n\n| variant | best |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["ablation"] == {"variants": {"full": "4/4"}}


def test_bench_ablation_import_failure_is_a_note(cli, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "agentsched.experiments.ablation", None)
    code, out, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--ablation",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    assert "note: ablation skipped: cannot import agentsched.experiments.ablation" in out
    assert "ablation" not in json.loads((tmp_path / "results.json").read_text())


def test_run_without_an_oracle_for_a_large_workflow(tmp_path, cli):
    import yaml

    big = tmp_path / "big.yaml"
    big.write_text(
        yaml.safe_dump(
            {"name": "big", "cards": "a5500", "edges": [], "tasks": {f"T{i:02d}": "web_search" for i in range(17)}}
        )
    )
    code, out, err = cli("run", str(big), "-p", "heft", "--rounds", "1", "--repeats", "1")
    assert code == 0, err
    assert out.splitlines()[0] == (
        "note: no oracle for big: brute force over 17 tasks is too large "
        "(2^17 = 131,072 mappings; limit 60,000); running without it"
    )
    code, out, err = cli("run", str(big), "-p", "oracle", "--rounds", "1", "--repeats", "1")
    assert code != 0
    assert err.strip() == (
        "error: no oracle for big: brute force over 17 tasks is too large (2^17 = 131,072 mappings; limit 60,000)"
    )


# ---- output paths are checked before the work ---------------------------------------------------
@pytest.fixture
def no_loop(monkeypatch):
    """Any run or oracle search fails the test: errors must come before the work."""
    from agentsched.loop import runner

    def boom(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(runner, "run_loop", boom)
    monkeypatch.setattr(runner, "reference_oracle", boom)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_run_json_unwritable_fails_before_the_work(no_loop, cli):
    code, out, err = cli("run", TINY, "-p", "heft", "--json-out", "/proc/x.json")
    assert code != 0 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: --json-out: cannot write /proc/x.json: ")


def test_run_json_parent_that_is_a_file_or_a_folder_target(no_loop, cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = cli("run", TINY, "-p", "heft", "--json-out", str(blocker / "x.json"))
    assert code != 0 and err.splitlines() == [f"error: --json-out: folder {blocker} is not a folder"]
    code, out, err = cli("run", TINY, "-p", "heft", "--json-out", str(tmp_path))
    assert code != 0 and err.splitlines() == [f"error: --json-out: {tmp_path} is a folder"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the check left nothing behind


def test_run_json_existing_file_is_left_as_it_is_until_written(tmp_path, cli):
    f = tmp_path / "run.json"
    f.write_text("old")
    code, out, err = cli("run", TINY, "-p", "heft", "--rounds", "1", "--repeats", "1", "--json-out", str(f))
    assert code == 0, err
    assert json.loads(f.read_text())["policy"] == "heft"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_bench_out_unwritable_fails_before_the_work_in_one_line(no_loop, cli):
    code, out, err = cli("bench", "--scenarios", TINY, "--policies", "heft", "--out", "/proc/x")
    assert code != 0
    assert out == ""  # no progress bar, no blank line
    assert err.splitlines() == ["error: cannot create output folder /proc/x: No such file or directory"]


# ---- --testbed local ----------------------------------------------------------------------------
@pytest.fixture
def no_cuda(monkeypatch):
    from agentsched.testbeds.local import LocalBackend

    monkeypatch.setattr(LocalBackend, "_real_cuda", staticmethod(lambda: False))


NO_CUDA_S1 = (
    "error: task A (whisper_base) is mapped to gpu_now but this machine has no CUDA GPU: use --testbed sim, "
    "or map every task to cpu"
)


# run on the local testbed without CUDA runs GPU placements as host code: test_no_cuda_host_runs.py


def test_bench_local_without_cuda_fails_once_up_front(no_cuda, no_loop, cli, tmp_path):
    pytest.importorskip("torch")
    code, out, err = cli(
        "bench", "--scenarios", "S1", "--policies", "heft", "--testbed", "local", "--out", str(tmp_path / "out")
    )
    assert code != 0 and out == ""
    assert err.splitlines() == [NO_CUDA_S1]
    assert not (tmp_path / "out").exists()


def test_bench_invalid_size(cli, tmp_path):
    pytest.importorskip("torch")
    code, out, err = cli(
        "bench",
        "--scenarios",
        TINY,
        "--policies",
        "heft",
        "--testbed",
        "local",
        "--size",
        "huge",
        "--out",
        str(tmp_path),
    )
    assert code != 0 and len(err.splitlines()) == 1 and "huge" in err


class _FakeTool:
    """A duck-typed tool for the local testbed: no torch, no work."""

    has_gpu = True

    def __init__(self, name, size, seed=0):
        self.name, self.device = name, None

    @property
    def loaded(self):
        return self.device is not None

    def load(self, device="cpu"):
        self.device = device

    def move(self, device):
        self.device = device

    def run(self, inputs):  # the public Tool API

        return self.call()

    def call(self):
        return None

    def sync(self):
        return None

    def unload(self):
        self.device = None


@pytest.fixture
def fake_local(monkeypatch, tmp_path):
    """The local testbed with fake tools and a fake GPU; returns a two-task workflow file."""
    import yaml

    import agentsched.tools as tools
    from agentsched.testbeds.local import LocalBackend

    monkeypatch.setattr(tools, "get_tool", _FakeTool)
    monkeypatch.setattr(tools, "tools_installed", lambda: True)
    monkeypatch.setattr(LocalBackend, "_cuda_available", lambda self: True)
    monkeypatch.setattr(LocalBackend, "_real_cuda", staticmethod(lambda: False))
    wf = tmp_path / "duo.yaml"
    wf.write_text(
        yaml.safe_dump({"name": "duo", "cards": "a5500", "edges": [], "tasks": {"A": "groupby", "B": "minilm_l6"}})
    )
    return str(wf)


def test_bench_on_the_local_testbed_records_it(fake_local, cli, tmp_path):
    import jsonschema

    from agentsched.experiments.results import results_schema

    out = tmp_path / "out"
    code, text, err = cli(
        "bench",
        "--scenarios",
        fake_local,
        "--policies",
        "heft,oracle",
        "--testbed",
        "local",
        "--size",
        "small",
        "--cpu-slots",
        "2",
        "--rounds",
        "2",
        "--repeats",
        "3",
        "--seeds",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "results.json").read_text())
    jsonschema.validate(doc, results_schema())
    assert doc["config"]["testbed"] == {
        "name": "local",
        "seed": 0,
        "noise_sigma": None,
        "size": "small",
        "cpu_slots": 2,
        "world": None,
        "ray_address": None,
        "emulate_gpu": None,
        "timeout_s": None,
    }
    assert doc["oracles"]["duo"]["executions"] == 4 * 3  # searched on the testbed itself: 4 mappings x 3 runs
    assert doc["config"]["ablation"] is False
    md = (out / "report.md").read_text()
    assert "\nTestbed local (real tools, size small, 2 CPU workers), 2 rounds x 3 executions" in md
    assert "## Oracles: ours (local testbed, median of 3 runs) vs the paper" in md


def test_run_on_the_local_testbed(fake_local, cli):
    code, out, err = cli("run", fake_local, "-p", "heft", "--testbed", "local", "--rounds", "1", "--repeats", "1")
    assert code == 0, err
    assert "oracle: " in out and "(noise-free)" not in out


def test_bench_config_records_the_sim_testbed():
    from agentsched.experiments.bench import BenchConfig
    from agentsched.testbeds.spec import TestbedSpec

    cfg = BenchConfig(scenarios=("S1",), policies=("heft",), testbed=TestbedSpec(noise_sigma=0.05, cpu_slots=4))
    assert cfg.to_dict()["testbed"] == {
        "name": "sim",
        "seed": 0,
        "noise_sigma": 0.05,
        "size": None,
        "cpu_slots": 4,
        "world": "a5500",
        "ray_address": None,
        "emulate_gpu": None,
        "timeout_s": None,
    }
    tb = cfg.spec.build()
    assert (tb.name, tb.noise_sigma, tb.cpu_slots) == ("sim", 0.05, 4)


def test_bench_local_ablation_runs_on_the_simulator_with_a_note(fake_local, cli, tmp_path, monkeypatch):
    import sys
    import types

    class Result:
        def to_markdown(self):
            return "| variant | best |\n|---|---|"

        def to_dict(self):
            return {}

    fake = types.ModuleType("agentsched.experiments.ablation")
    fake.run_ablation = lambda workflow, **kw: Result()
    monkeypatch.setitem(sys.modules, "agentsched.experiments.ablation", fake)
    code, out, err = cli(
        "bench",
        "--scenarios",
        fake_local,
        "--policies",
        "heft",
        "--testbed",
        "local",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--ablation",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    assert "note: the S13 ablation ran on the simulated testbed, not on local" in out


def test_run_regret_of_a_never_feasible_policy_is_na(cli, tmp_path):
    import yaml

    # clip (656 MB) and bert_base (486 MB) both on gpu_now at t=0: all-gpu never fits a 1000 MB budget
    wf = tmp_path / "oom.yaml"
    wf.write_text(
        yaml.safe_dump(
            {
                "name": "oom",
                "cards": "a5500",
                "vram_budget_mb": 1000,
                "edges": [],
                "tasks": {"A": "clip", "B": "bert_base"},
            }
        )
    )
    code, out, err = cli("run", str(wf), "-p", "all-gpu", "--rounds", "2", "--repeats", "1")
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "match 0/2, first oracle-equivalent round never, executions 2 (0 probes, "
        "2 infeasible), regret n/a (never feasible)"
    )


def test_run_agent_plan_over_its_task_cap_is_one_line_before_the_work(tmp_path, no_loop, cli):
    import yaml

    from agentsched.planner.search import MAX_PLAN_TASKS

    n = MAX_PLAN_TASKS + 1
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump({"name": "big", "tasks": {f"T{i}": "clip" for i in range(n)}}))
    code, out, err = cli("run", str(big), "-p", "agent-plan", "--no-oracle")
    assert code == 2 and out == ""
    assert err.strip() == f"error: agent-plan plans at most {MAX_PLAN_TASKS:,} tasks (big has {n:,}); use agent-rules"


def test_run_without_a_policy_beyond_the_planner_cap_runs_agent_rules(tmp_path, cli):
    import yaml

    from agentsched.planner.search import MAX_PLAN_TASKS

    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump({"name": "big", "tasks": {f"T{i}": "web_search" for i in range(MAX_PLAN_TASKS + 1)}}))
    code, out, err = cli("run", str(big), "--rounds", "1", "--repeats", "1", "--no-oracle")
    assert code == 0, err
    assert "policy agent-rules," in out
