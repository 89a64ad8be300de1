"""store/unwritten.py and Store.write_unwritten: records kept on disk while the store refused them
go into the next store opened at that path, in order, by learner key; nothing is silently dropped."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.store import Store
from agentsched.store.unwritten import execution_record, keep, round_record, taken, unwritten_files, waiting


def _x(e2e_ms: float) -> Execution:
    return Execution(
        status=Status.OK,
        mapping={"t1": Mode.CPU},
        e2e_ms=e2e_ms,
        elapsed_ms=e2e_ms,
        peak_vram_mb=0.0,
        spans=(),
        testbed="sim",
    )


def _learner(db):
    st = Store(db)
    try:
        return st.learner(load_scenario("S1"), "rules", {"seed": 0})
    finally:
        st.close()


def test_kept_records_come_back_in_order_and_the_file_goes(tmp_path):
    db = tmp_path / "s.db"
    assert keep(db, [{"op": "round", "n": 1}]) == unwritten_files(db)[0]
    keep(db, [{"op": "round", "n": 2}, {"op": "execution", "n": 3}])
    with taken(unwritten_files(db)[0]) as records:
        assert [d["n"] for d in records.docs] == [1, 2, 3]
    assert not unwritten_files(db)[0].exists() and list(tmp_path.glob("*.taking")) == []
    with taken(unwritten_files(db)[0]) as records:
        assert records.docs == []


def test_records_taken_by_a_block_that_fails_stay_on_disk(tmp_path):
    db = tmp_path / "s.db"
    keep(db, [{"op": "round", "n": 1}])
    with pytest.raises(RuntimeError):
        with taken(unwritten_files(db)[0]):
            raise RuntimeError("the process dies before its commit")
    (aside,) = tmp_path.glob("*.taking")  # taken by the next store opened once this process has ended
    assert json.loads(aside.read_text())["n"] == 1


def test_lines_that_are_not_records_are_set_aside_not_dropped(tmp_path):
    db = tmp_path / "s.db"
    path = unwritten_files(db)[0]
    path.write_text('{"op": "round", "n": 1}\nnot json\n[1, 2]\n{"op": "mystery"}\n')
    with taken(path) as records:
        assert records.docs == [{"op": "round", "n": 1}]
    assert len(path.with_name(path.name + ".rejected").read_text().splitlines()) == 3


def test_a_store_folder_that_cannot_be_written_sends_them_to_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    db = tmp_path / "missing" / "s.db"
    where = keep(db, [{"op": "round", "n": 1}])
    assert where == unwritten_files(db)[1] and where.is_relative_to(tmp_path / "state")


def test_a_file_left_aside_by_a_process_that_died_is_taken_too(tmp_path):
    db = tmp_path / "s.db"
    path = unwritten_files(db)[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path.with_name(f"{path.name}.{int(dead.stdout)}.taking").write_text('{"op": "round", "n": 0}\n')
    keep(db, [{"op": "round", "n": 1}])
    with taken(path) as records:
        assert [d["n"] for d in records.docs] == [0, 1]
    assert list(tmp_path.glob("*.taking")) == []


def test_the_next_store_writes_them_by_learner_key(tmp_path, caplog):
    db = tmp_path / "s.db"
    row = _learner(db)
    st = Store(db)
    try:
        assert st.append(row.id, 0, "round", 0, _x(10.0)) == (1, True)
    finally:
        st.close()
    keep(
        db,
        [
            execution_record(row.key, 0, "round", 0, _x(11.0)),  # place 0 taken meanwhile
            execution_record(row.key, 1, "round", 0, _x(12.0)),
            round_record(row.key, 0, {"t1": Mode.CPU}, Status.OK, 11.5, 2, "first round"),
        ],
    )
    st = Store(db)
    try:
        rows = st.executions(row.id)
        assert [(e.seq, e.e2e_ms) for e in rows] == [(0, 10.0), (None, 11.0), (1, 12.0)]
        assert [(r.round, r.e2e_ms, r.reason) for r in st.rounds(row.id)] == [(0, 11.5, "first round")]
    finally:
        st.close()
    assert not unwritten_files(db)[0].exists() and "3 record(s) kept in" in caplog.text


def test_records_of_a_learner_the_store_does_not_have_are_set_aside(tmp_path, caplog):
    db = tmp_path / "s.db"
    row = _learner(db)
    keep(
        db,
        [
            execution_record("no-such-key", None, "pinned", None, _x(1.0)),
            {**execution_record(row.key, None, "pinned", None, _x(3.0)), "execution": {"status": "ok"}},  # malformed
            execution_record(row.key, None, "pinned", None, _x(2.0)),
        ],
    )
    st = Store(db)
    try:
        assert [e.e2e_ms for e in st.executions(row.id)] == [2.0]
    finally:
        st.close()
    rejected = unwritten_files(db)[0].with_name(unwritten_files(db)[0].name + ".rejected")
    assert [json.loads(line)["learner"] for line in rejected.read_text().splitlines()] == ["no-such-key", row.key]
    assert "2 unwritten record(s) cannot go into the store" in caplog.text


def test_a_store_still_locked_at_open_keeps_them_for_the_next_open(tmp_path, caplog):
    db = tmp_path / "s.db"
    row = _learner(db)
    keep(db, [execution_record(row.key, None, "pinned", None, _x(1.0))])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        Store(db, busy_timeout_s=0.2).close()  # opens all the same: its own writes wait as usual
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "1 unwritten record(s)" in caplog.text and "wait on disk for the next try" in caplog.text
    assert sum(waiting(db).values()) == 1  # set aside, still counted by ``store list``
    st = Store(db)  # this process's next try takes what it set aside
    try:
        assert [e.e2e_ms for e in st.executions(row.id)] == [1.0]
    finally:
        st.close()
    assert waiting(db) == {} and list(tmp_path.glob("*.taking")) == []


_DIES_BEFORE_REMOVING = """
import os, pathlib, sys
from agentsched.store import Store
unlink = pathlib.Path.unlink
def dies(self, *args, **kwargs):  # the process ends after its commit, before the file's removal
    if self.name.endswith(".taking"):
        os._exit(3)
    return unlink(self, *args, **kwargs)
pathlib.Path.unlink = dies
Store(sys.argv[1])
"""


def test_records_written_by_a_process_that_died_before_removing_them_are_not_written_again(tmp_path):
    db = tmp_path / "s.db"
    row = _learner(db)
    keep(
        db,
        [
            execution_record(row.key, None, "pinned", None, _x(1.0)),
            round_record(row.key, 0, {"t1": Mode.CPU}, Status.OK, 1.0, 1, "r"),
        ],
    )
    child = subprocess.run([sys.executable, "-c", _DIES_BEFORE_REMOVING, str(db)], capture_output=True, text=True)
    assert child.returncode == 3, child.stderr
    assert len(list(tmp_path.glob("*.taking"))) == 1  # written, and left on disk
    st = Store(db)
    try:
        assert [e.e2e_ms for e in st.executions(row.id)] == [1.0] and len(st.rounds(row.id)) == 1
        marks = st._conn.execute("SELECT COUNT(*) FROM unwritten_taken").fetchone()[0]
    finally:
        st.close()
    assert list(tmp_path.glob("*.taking")) == [] and marks == 0


def test_records_kept_while_another_thread_takes_are_each_taken_once(tmp_path):
    import threading

    db, path = tmp_path / "s.db", unwritten_files(tmp_path / "s.db")[0]
    got: list[int] = []

    def writer(w: int) -> None:
        for i in range(50):
            keep(db, [{"op": "round", "n": w * 1000 + i}])

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    while any(t.is_alive() for t in writers):
        with taken(path) as records:
            got += [d["n"] for d in records.docs]
    with taken(path) as records:
        got += [d["n"] for d in records.docs]
    assert sorted(got) == sorted(w * 1000 + i for w in range(4) for i in range(50))
