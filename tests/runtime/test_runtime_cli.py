"""`agentsched invoke` and `history` as a new user runs them: separate processes, in the user's own
folder outside the package, one store file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def agentsched(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """One `agentsched` process started in ``cwd`` (the user's folder)."""
    return subprocess.run(
        [sys.executable, "-m", "agentsched", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def invoke_json(cwd: Path, store: Path, text: str) -> dict:
    p = agentsched(
        cwd,
        "invoke",
        "words.yaml",
        "--input",
        f"text={text}",
        "--store",
        str(store),
        "--json",
        "--round-size",
        "2",
        "--explore-fraction",
        "0.25",
        "--cpu-slots",
        "2",
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_user_project_runs_and_history_shows_every_invocation(project, tmp_path):
    store = tmp_path / "runtime.db"
    texts = ["one two three", "a b", "x", "four words right here", "p q r s t", "end"]
    docs = [invoke_json(project, store, t) for t in texts]
    for doc, text in zip(docs, texts, strict=True):
        assert doc["status"] == "ok" and doc["outputs"] == {"B": len(text.split()), "C": text.upper()}
        assert set(doc["mapping"]) == {"A", "B", "C"} and doc["e2e_ms"] > 0
    assert [d["invocation_id"] for d in docs] == [1, 2, 3, 4, 5, 6]
    # each process resumed the learner: rounds advance across processes (2 invocations per round,
    # what-if probes within a quarter of the invocations)
    assert docs[-1]["round"] >= 2 and sum(d["kind"] == "probe" for d in docs) <= 0.25 * len(docs)

    hist = agentsched(project, "history", "words", "--store", str(store), "--json")
    assert hist.returncode == 0, hist.stderr
    learners = json.loads(hist.stdout)["learners"]
    assert len(learners) == 1
    ln = learners[0]
    assert [e["invocation_id"] for e in ln["executions"]] == [1, 2, 3, 4, 5, 6]
    assert [e["e2e_ms"] for e in ln["executions"]] == [d["e2e_ms"] for d in docs]
    assert [r["round"] for r in ln["rounds"]] == list(range(len(ln["rounds"]))) and len(ln["rounds"]) >= 2
    assert ln["policy"] == "agent-plan-cold"  # the default where a tool has no card

    text = agentsched(project, "history", "words.yaml", "--store", str(store), "--plot", str(tmp_path / "c.png"))
    assert text.returncode == 0, text.stderr
    assert "6 invocations" in text.stdout and (tmp_path / "c.png").stat().st_size > 1000

    # and learning continues: a new invocation extends the same learner
    more = invoke_json(project, store, "again")
    assert more["invocation_id"] == 7 and more["round"] >= docs[-1]["round"]


def test_plain_output(project, tmp_path):
    p = agentsched(
        project, "invoke", "words.yaml", "-i", "text=hello world", "--store", str(tmp_path / "s.db"), "--cpu-slots", "1"
    )
    assert p.returncode == 0, p.stderr
    assert "output B: 2" in p.stdout and 'output C: "HELLO WORLD"' in p.stdout and "mapping: A=" in p.stdout


def test_inputs_from_a_json_file(project, tmp_path):
    (tmp_path / "in.json").write_text(json.dumps({"text": "from a file"}))
    p = agentsched(
        project,
        "invoke",
        "words.yaml",
        "--input-json",
        str(tmp_path / "in.json"),
        "--store",
        str(tmp_path / "s.db"),
        "--json",
        "--cpu-slots",
        "1",
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["outputs"]["C"] == "FROM A FILE"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml", "-i", "x=1"], "missing.yaml: tool nowhere_pkg.tools:Thing: no module named 'nowhere_pkg'"),
        (
            ["plain.yaml", "-i", "x=1"],
            "plain.yaml: tool wordtools:Plain: class Plain is not an agentsched.Tool subclass",
        ),
        (["words.yaml"], "invocation is missing input(s) for source task A (wordtools:Split): text"),
        (["words.yaml", "-i", "text"], "--input 'text' is not NAME=VALUE"),
        (
            ["opaque.yaml", "-i", "x=1", "--json"],
            "output of task A (object) cannot be written as JSON (invocation 1 is stored)",
        ),
        (["words.yaml", "-i", "text=a", "--policy", "starpu"], "policy starpu needs profile cards"),
    ],
)
def test_bad_input_is_one_line(project, tmp_path, args, message):
    p = agentsched(project, "invoke", *args, "--store", str(tmp_path / "s.db"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], p.stderr


def test_a_tool_that_raises_exits_1_and_is_stored(project, tmp_path):
    store = tmp_path / "s.db"
    p = agentsched(project, "invoke", "words.yaml", "-i", "text=boom", "--store", str(store), "--cpu-slots", "1")
    assert p.returncode == 1 and "error (task A (wordtools:Split) failed: ValueError: cannot split boom)" in p.stdout
    h = json.loads(agentsched(project, "history", "words", "--store", str(store), "--json").stdout)
    assert h["learners"][0]["executions"][0]["status"] == "error"


@pytest.mark.parametrize("kind", ["corrupt", "newer", "foreign"])
def test_bad_stores_are_refused_and_left_intact(project, tmp_path, kind):
    store = tmp_path / "s.db"
    if kind == "corrupt":
        store.write_bytes(b"not a database at all" * 200)
        message = "is corrupt or not an SQLite file"
    else:
        invoke_json(project, store, "seed the store")
        with sqlite3.connect(store) as c:
            if kind == "newer":
                c.execute("INSERT INTO schema_version VALUES (99)")
                message = "has schema version 99, newer than this agentsched's"
            else:
                c.execute("DROP TABLE schema_version")
                message = "not an agentsched store"
    before = store.read_bytes()
    for cmd in (["invoke", "words.yaml", "-i", "text=a"], ["history", "words"]):
        p = agentsched(project, *cmd, "--store", str(store))
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    if kind != "corrupt":  # the recorded invocation is still there
        assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM executions").fetchone()[0] == 1
    else:
        assert store.read_bytes() == before


def test_two_processes_invoke_on_one_store(project, tmp_path):
    store = tmp_path / "s.db"
    script = tmp_path / "client.py"
    script.write_text(
        "import sys\nfrom agentsched import Runtime, TestbedSpec, load_workflow_file\n"
        "with Runtime(load_workflow_file('words.yaml'), store=sys.argv[1], round_size=2,\n"
        "             testbed=TestbedSpec(kind='local', cpu_slots=1)) as rt:\n"
        "    for i in range(12):\n"
        "        r = rt.invoke(text=f'{sys.argv[2]} {i}')\n"
        "        assert r.ok and r.outputs['C'] == f'{sys.argv[2]} {i}'.upper(), r\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(store), name], cwd=project, stderr=subprocess.PIPE, text=True
        )
        for name in ("left", "right")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    conn = sqlite3.connect(store)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM executions").fetchone()[0] == 24  # every invocation kept
    seqs = [r[0] for r in conn.execute("SELECT seq FROM executions WHERE seq IS NOT NULL ORDER BY seq")]
    assert seqs == list(range(len(seqs)))
    h = agentsched(project, "history", "words", "--store", str(store), "--json")
    assert len(json.loads(h.stdout)["learners"][0]["executions"]) == 24


def test_run_and_prompt_take_unprofiled_tools_as_invoke_does(project):
    """One rule for every command: an agent runs in cold start, a policy that needs cards is refused
    (before, ``run`` and ``prompt`` showed placeholder cards as if profiled and ran heft on them)."""
    p = agentsched(project, "prompt", "words.yaml", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    user = doc["messages"][-1]["content"]
    assert doc["start"] == "cold" and "Tools (cold start: no profiles)" in user and "Tool cards" not in user
    p = agentsched(project, "prompt", "words.yaml", "--start", "warm")
    assert p.returncode == 2 and p.stderr.strip() == "error: --start warm needs cards, but task(s) A, B, C have none"
    for policy in ("heft", "starpu"):
        p = agentsched(project, "run", "words.yaml", "--testbed", "local", "-p", policy, "--rounds", "1")
        assert (
            p.returncode == 2
            and f"error: policy {policy} needs profile cards, but task(s) A, B, C have" in p.stderr
            and len(p.stderr.strip().splitlines()) == 1
        ), p.stderr
