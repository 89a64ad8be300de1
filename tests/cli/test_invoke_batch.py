"""invoke --inputs-jsonl (one process, JSONL out, exit 1 when one fails), invoke --mapping, history --best."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "examples" / "serve" / "workflows"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "agentsched", *args], cwd=WORKFLOWS, env=env, capture_output=True, text=True, timeout=300
    )


def test_inputs_jsonl_runs_every_line_in_one_process(tmp_path):
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"text": "a bb ccc"}\n\n{"text": "hello world"}\n{"nope": 1}\n')
    r = _cli("invoke", "wordstats.yaml", "--inputs-jsonl", str(lines), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 1  # line 4 is refused: the failure is the exit status
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [d["line"] for d in out] == [1, 3, 4]
    assert out[0]["outputs"] == {"summary": {"count": 3, "longest": "ccc"}}
    assert out[1]["outputs"] == {"summary": {"count": 2, "longest": "hello"}}
    assert out[0]["invocation_id"] == 1 and out[1]["invocation_id"] == 2
    assert out[2]["status"] == "refused" and "text" in out[2]["message"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n[1]\n')
    r = _cli("invoke", "wordstats.yaml", "--inputs-jsonl", str(bad), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2 and "line 2: expected a JSON object" in r.stderr and r.stdout == ""


def test_mapping_pins_the_invocation_and_history_best(tmp_path):
    db = str(tmp_path / "m.db")
    pin = "A=cpu,B=gpu_now,C=cpu,D=cpu"
    r = _cli("invoke", "S1", "--testbed", "sim", "--mapping", pin, "--store", db, "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["kind"] == "pinned"
    assert d["mapping"] == {"A": "cpu", "B": "gpu_now", "C": "cpu", "D": "cpu"}
    assert "misses task(s)" in _cli("invoke", "S1", "--testbed", "sim", "--mapping", "A=cpu", "--store", db).stderr
    lines = tmp_path / "empty.jsonl"
    lines.write_text("{}\n" * 5)  # S1's built-in tools need no inputs: one round of 5
    assert _cli("invoke", "S1", "--testbed", "sim", "--inputs-jsonl", str(lines), "--store", db).returncode == 0
    r = _cli("history", "S1", "--best", "--json", "--store", db)
    (learner,) = json.loads(r.stdout)["learners"]
    assert learner["rounds"] == 1 and learner["best_round"] == 0 and set(learner["best_mapping"]) == set("ABCD")
    assert learner["best_e2e_ms"] > 0
    # S1 is binary: its modes are spelled as the service's API and the store spell them (gpu_now)
    shown = ",".join(f"{t}={m}" for t, m in learner["best_mapping"].items())
    assert "gpu_now" in shown
    assert f"best {shown} (round 0" in _cli("history", "S1", "--best", "--store", db).stdout
