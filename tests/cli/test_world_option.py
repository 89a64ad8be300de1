"""--world on the commands that run the simulator, and the workflow file's world: key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

TINY = Path(__file__).parents[1] / "data" / "workflows" / "tiny.yaml"  # world: no_contention_world.json


def _e2e(cli, *args: str) -> float:
    code, out, err = cli("simulate", *args, "--json")
    assert code == 0, err
    return json.loads(out)["e2e_ms"]


def _workflow(tmp_path: Path, world: str | None) -> str:
    doc = {"name": "duo", "cards": "a5500", "decision_space": "binary", "tasks": {"A": "clip", "B": "resnet50"}}
    if world is not None:
        doc["world"] = world
    f = tmp_path / "duo.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def test_world_precedence_option_then_workflow_key_then_a5500(cli, tmp_path):
    (tmp_path / "calm.json").write_text(json.dumps({"default": {"sensitivity": 0, "pressure": 0}}))
    m = ("-m", "A=gpu,B=gpu", "--noise", "0")
    default = _e2e(cli, _workflow(tmp_path, None), *m)
    assert _e2e(cli, _workflow(tmp_path, "a5500"), *m) == default
    calm = _e2e(cli, _workflow(tmp_path, "calm.json"), *m)  # a path relative to the workflow file
    assert calm < default
    assert _e2e(cli, _workflow(tmp_path, "calm.json"), *m, "--world", "a5500") == default  # --world wins
    assert _e2e(cli, _workflow(tmp_path, None), *m, "--world", str(tmp_path / "calm.json")) == calm
    assert _e2e(cli, _workflow(tmp_path, None), *m, "--world", "perturbed:4") not in (default, calm)


def test_bench_names_a_perturbed_world_in_results_and_report(cli, tmp_path):
    out = tmp_path / "out"
    code, _, err = cli(
        "bench",
        "--world",
        "perturbed:1",
        "--seeds",
        "1",
        "--rounds",
        "3",
        "--scenarios",
        "S5",
        "--policies",
        "heft,oracle",
        "--out",
        str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["testbed"]["world"] == "perturbed:1"
    md = (out / "report.md").read_text()
    assert "Simulated testbed (noise sigma 0.03, world perturbed:1; the paper's figures are for the a5500 world)" in md


def test_bench_of_workflows_in_different_worlds_needs_world(cli, tmp_path):
    code, out, err = cli("bench", "--scenarios", f"{TINY},S5", "--policies", "heft", "--out", str(tmp_path))
    assert code != 0 and out == ""
    assert err.splitlines() == [
        f"error: the workflows name different worlds ({TINY.parent / 'no_contention_world.json'}, "
        "a5500): choose one with --world"
    ]


def test_world_errors_are_one_line(cli, tmp_path):
    code, _, err = cli("simulate", "S5", "-m", "A=gpu,B=gpu,C=gpu,D=gpu", "--world", "mars")
    assert code != 0 and err == (
        "error: world 'mars' is neither a built-in world (a5500, a5500-heavy, a5500-max, "
        "a5500-power, a5500-saturating, a5500-threshold), perturbed:SEED[:BASE], "
        "understated:SEED[:BASE], drift:A,B,ROUND, nor a file\n"
    )
    code, _, err = cli("oracle", "S5", "--testbed", "local", "--world", "perturbed:1")
    assert code != 0 and err.splitlines() == ["error: --world applies only to the sim testbed (got local)"]
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump({"name": "w", "tasks": {"A": "clip"}, "world": 3}))
    code, _, err = cli("run", str(f), "-p", "heft")
    assert code != 0 and err.splitlines() == [
        f"error: {f}: world: must be a built-in world name or a path to a world file"
    ]


def test_calibrate_ablation_and_agent_check_take_world(cli, tmp_path):
    code, out, err = cli("calibrate", "--world", "perturbed:1", "--json")
    assert code == 0, err
    assert json.loads(out)["world"] == "perturbed:1"
    j = tmp_path / "a.json"
    code, out, err = cli(
        "ablation",
        "S5",
        "--world",
        "perturbed:2",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--initial",
        "rules",
        "--json-out",
        str(j),
    )
    assert code == 0, err
    assert json.loads(j.read_text())["world"] == "perturbed:2" and "world perturbed:2" in out
    j = tmp_path / "c.json"
    code, out, err = cli(
        "agent-check",
        "S1",
        "--world",
        "perturbed:3",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--baseline",
        "none",
        "--json-out",
        str(j),
    )
    assert json.loads(j.read_text())["world"] == "perturbed:3", err
