"""agentsched store list|forget|export|vacuum: what each says, and a bad, missing or locked store as one line."""

from __future__ import annotations

import json
import sqlite3

import pytest

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.store import Store
from agentsched.store.export import read_export


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s?#.db"  # URI characters in the name: the very file is used
    st = Store(path)
    for name, n in (("S1", 3), ("S2", 2)):
        ln = st.learner(load_scenario(name), "agent-rules", {"round_size": 1})
        for i in range(n):
            st.append(
                ln.id,
                i,
                "round",
                i,
                Execution(
                    status=Status.OK,
                    mapping={"A": Mode.CPU},
                    e2e_ms=10.0 + i,
                    elapsed_ms=10.0,
                    peak_vram_mb=0.0,
                    spans=(),
                    testbed="sim",
                ),
            )
        st.add_round(ln.id, 0, {"A": Mode.CPU}, Status.OK, 10.0, 1, "start")
    st.close()
    return path


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    return err.strip()


def test_list_json_names_each_learner(cli, db):
    code, out, err = cli("store", "list", "--store", str(db), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    rows = {r["workflow"]: r for r in doc["learners"]}
    assert set(rows) == {"S1", "S2"} and rows["S1"]["invocations"] == 3 and rows["S2"]["invocations"] == 2
    assert rows["S1"]["best_mapping"] == {"A": "cpu"} and rows["S1"]["best_e2e_ms"] == 10.0
    assert len(rows["S1"]["key"]) == 16 and rows["S1"]["last_s"] > 0 and doc["bytes"] > 0
    code, out, _ = cli("store", "list", "--store", str(db))
    assert code == 0 and "S1" in out and rows["S2"]["key"] in out and "A=cpu" in out
    assert doc["unwritten"] == {} and "kept in" not in out


def test_list_says_what_waits_on_disk_and_a_writable_open_writes_it(cli, db):
    from agentsched.store.unwritten import execution_record, keep

    key = json.loads(cli("store", "list", "--store", str(db), "--json")[1])["learners"][0]["key"]
    x = Execution(
        status=Status.OK, mapping={"A": Mode.CPU}, e2e_ms=9.0, elapsed_ms=9.0, peak_vram_mb=0.0, spans=(), testbed="sim"
    )
    where = keep(db, [execution_record(key, None, "pinned", None, x)])
    code, out, _ = cli("store", "list", "--store", str(db), "--json")
    assert json.loads(out)["unwritten"] == {str(where): 1}
    code, out, _ = cli("store", "list", "--store", str(db))
    assert "1 record(s) kept in" in out.replace("\n", "")  # (read-only: list writes nothing)
    assert cli("store", "vacuum", "--store", str(db))[0] == 0
    rows = {r["workflow"]: r for r in json.loads(cli("store", "list", "--store", str(db), "--json")[1])["learners"]}
    assert rows["S1"]["invocations"] == 4 and not where.exists()


def test_forget_removes_one_learner_and_says_so(cli, db):
    code, out, err = cli("store", "forget", "S1", "--store", str(db))
    assert code == 0 and err == ""
    assert "forgot learner #1" in out and "of S1" in out and "3 invocation(s)" in out
    code, out, _ = cli("store", "list", "--store", str(db), "--json")
    assert [r["workflow"] for r in json.loads(out)["learners"]] == ["S2"]  # the other one is untouched
    code, _, err = cli("store", "forget", "S1", "--store", str(db))
    assert code == 2 and _one_line(err).startswith("error: store ") and "has no learner 'S1'" in err


def test_export_writes_json_that_reads_back(cli, db, tmp_path):
    out_file = tmp_path / "s2.json"
    code, out, err = cli("store", "export", "S2", "--out", str(out_file), "--store", str(db))
    assert code == 0 and err == "" and "2 invocation(s)" in out
    doc = read_export(out_file)
    assert doc["learner"]["workflow_name"] == "S2" and [e["record"]["e2e_ms"] for e in doc["executions"]] == [
        10.0,
        11.0,
    ]
    code, _, err = cli("store", "export", "nope", "--out", str(tmp_path / "n.json"), "--store", str(db))
    assert code == 2 and "has no learner 'nope'" in _one_line(err) and not (tmp_path / "n.json").exists()
    code, _, err = cli("store", "export", "S1", "--out", str(out_file), "--store", str(db))  # an export: replaced
    assert code == 0 and read_export(out_file)["learner"]["workflow_name"] == "S1"
    mine = tmp_path / "words.yaml"
    mine.write_text("name: words\n")
    code, _, err = cli("store", "export", "S2", "--out", str(mine), "--store", str(db))
    assert code == 2 and _one_line(err) == (
        f"error: --out: {mine} exists and is not an agentsched export: not "
        "overwritten (remove it or choose another file)"
    )
    assert mine.read_text() == "name: words\n"
    older = tmp_path / "old.json"  # an export of another version is an export still: replaced
    older.write_text(json.dumps({"format": "agentsched-learner-export", "version": 0}, indent=1))
    code, _, err = cli("store", "export", "S2", "--out", str(older), "--store", str(db))
    assert code == 0 and read_export(older)["learner"]["workflow_name"] == "S2", err


def test_vacuum_prints_bytes_before_and_after(cli, db):
    code, out, err = cli("store", "vacuum", "--store", str(db))
    assert code == 0 and err == ""
    assert "bytes before" in out and "bytes after" in out
    code, out, _ = cli("store", "list", "--store", str(db), "--json")
    assert len(json.loads(out)["learners"]) == 2  # nothing learned was lost


@pytest.mark.parametrize("command", [("list",), ("forget", "S1"), ("export", "S1", "--out", "x.json"), ("vacuum",)])
def test_a_missing_or_corrupt_store_is_one_line(cli, tmp_path, command):
    code, _, err = cli("store", *command, "--store", str(tmp_path / "none.db"))
    assert code == 2 and _one_line(err) == f"error: store {tmp_path / 'none.db'} does not exist"
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 300)
    code, _, err = cli("store", *command, "--store", str(bad))
    assert code == 2 and "is corrupt or not an SQLite file" in _one_line(err)
    assert bad.read_bytes() == b"not a database at all" * 300  # left as it was
    empty = tmp_path / "empty.db"  # before, vacuum and forget made it a new store
    empty.write_bytes(b"")
    code, _, err = cli("store", *command, "--store", str(empty))
    assert code == 2 and _one_line(err) == f"error: store {empty} is empty (no runtime has written to it yet)"
    assert empty.read_bytes() == b""


def test_a_locked_store_is_one_line_and_loses_nothing(cli, db):
    holder = sqlite3.connect(
        f"file:{db.as_posix().replace('?', '%3F').replace('#', '%23')}", uri=True, isolation_level=None
    )
    holder.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        code, _, err = cli("store", "forget", "S1", "--store", str(db), "--wait-s", "0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 2 and "is locked by another process" in err.strip().splitlines()[-1]
    assert "Traceback" not in err
    code, out, _ = cli("store", "list", "--store", str(db), "--json")
    assert {r["workflow"]: r["invocations"] for r in json.loads(out)["learners"]} == {"S1": 3, "S2": 2}


def test_json_on_every_store_command(cli, db, tmp_path):
    code, out, _ = cli("store", "vacuum", "--store", str(db), "--json")
    assert code == 0 and json.loads(out)["bytes_after"] > 0
    code, out, _ = cli("store", "export", "S1", "--out", str(tmp_path / "e.json"), "--store", str(db), "--json")
    assert code == 0 and json.loads(out)["invocations"] == 3
    code, out, _ = cli("store", "forget", "S1", "--store", str(db), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["forgot"]["workflow"] == "S1" and doc["invocations_removed"] == 3


@pytest.mark.parametrize(
    "args, usage",
    [
        (
            ["store", "export", "#1", "--store", "s.db"],
            "error: Missing option '--out'. (see 'agentsched store export --help')",
        ),
        (["store", "list", "--bogus"], "error: No such option: --bogus (see 'agentsched store list --help')"),
        (
            ["serve", "S1", "--store", "s.db", "--log-level", "loud"],  # before: an internal error (uvicorn's KeyError)
            "error: Invalid value for '--log-level': 'loud' is not one of 'critical', 'error', 'warning', 'info', 'debug', "
            "'trace'. (see 'agentsched serve --help')",
        ),
    ],
)
def test_a_usage_error_names_the_whole_command(cli, args, usage):
    """Before, a subcommand's usage error sent to `agentsched export --help`, which does not exist."""
    code, _, err = cli(*args)
    assert code == 2 and err.strip() == usage


def test_a_store_path_that_is_a_folder_is_not_said_to_be_missing(cli, tmp_path):
    code, _, err = cli("store", "list", "--store", str(tmp_path))  # before: "does not exist"
    assert code == 2 and err.strip() == f"error: store {tmp_path} is not a regular file"
    code, _, err = cli("store", "list", "--store", str(tmp_path / "none.db"))
    assert code == 2 and err.strip() == f"error: store {tmp_path / 'none.db'} does not exist"
