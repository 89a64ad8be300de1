"""The persistent store: records round-trip exactly, concurrent appends, and every bad store is a
one-line StoreError that loses no history."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from agentsched.errors import StoreError
from agentsched.model.cards import CardSet
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.store import SCHEMA_VERSION, Store, execution_from_doc, execution_to_doc


def _execution(e2e: float = 12.345678901234567, status: Status = Status.OK) -> Execution:
    spans = (
        TaskSpan("A", "groupby", Mode.CPU, 0.0, 0.1, 5.123456789, 0.0, 0.0),
        TaskSpan("B", "clip", Mode.GPU_QUEUE, 5.123456789, 5.2, None if status is not Status.OK else e2e, 1.5, 300.25),
    )
    return Execution(
        status=status,
        mapping={"A": Mode.CPU, "B": Mode.GPU_QUEUE},
        e2e_ms=e2e if status is Status.OK else None,
        elapsed_ms=e2e,
        peak_vram_mb=300.25,
        spans=spans,
        vram_timeline=((0.0, 0.0), (5.2, 300.25)),
        message="" if status is Status.OK else "boom",
        testbed="local",
        extra={"size": "small", "failed_task": None, "obj": object()},
        outputs={"B": object()},
    )


def test_execution_round_trips_at_full_precision():
    x = _execution()
    y = execution_from_doc(execution_to_doc(x))
    assert y.mapping == x.mapping and y.spans == x.spans and y.e2e_ms == x.e2e_ms
    assert y.vram_timeline == x.vram_timeline and y.status is Status.OK
    assert "obj" not in y.extra and y.extra["size"] == "small"  # what JSON cannot hold is dropped
    assert y.outputs == {}  # outputs are the caller's data, never stored


@pytest.fixture
def store(tmp_path):
    st = Store(tmp_path / "s.db")
    yield st
    st.close()


def test_new_store_is_wal_with_a_schema_version(store):
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_learner_is_keyed_by_workflow_cards_policy_and_settings(store):
    wf = load_scenario("S5")
    a = store.learner(wf, "agent-rules", {"round_size": 5})
    assert store.learner(wf, "agent-rules", {"round_size": 5}).id == a.id
    assert store.learner(wf, "agent-rules", {"round_size": 3}).id != a.id
    slower = CardSet(
        name="slower", cards={k: c.model_copy(update={"cpu_ms": c.cpu_ms * 2}) for k, c in wf.card_set.cards.items()}
    )
    assert store.learner(wf.with_cards(slower), "agent-rules", {"round_size": 5}).id != a.id
    assert store.learner(load_scenario("S6"), "agent-rules", {"round_size": 5}).id != a.id
    assert [ln.id for ln in store.learners("S5")] == [a.id, a.id + 1, a.id + 2]
    assert store.card_doc(a.card_hash)["cards"]["A"]["name"] == wf.task_cards["A"].name


def test_a_taken_place_keeps_the_execution_outside_the_sequence(tmp_path):
    a, b = Store(tmp_path / "s.db"), Store(tmp_path / "s.db")
    lid = a.learner(load_scenario("S5"), "p", {}).id
    first, took = a.append(lid, 0, "round", 0, _execution(10.0))
    second, took2 = b.append(lid, 0, "round", 0, _execution(11.0))
    assert took and not took2 and second > first
    assert b.execution_at(lid, 0).e2e_ms == 10.0
    rows = a.executions(lid)
    assert [(r.seq, r.e2e_ms) for r in rows] == [(0, 10.0), (None, 11.0)]
    assert a.sequence_length(lid) == 1


def test_rounds_are_recorded_once(store):
    lid = store.learner(load_scenario("S5"), "p", {}).id
    store.add_round(lid, 0, {"A": Mode.CPU}, Status.OK, 5.0, 5, "r0")
    store.add_round(lid, 0, {"A": Mode.GPU_NOW}, Status.OK, 1.0, 5, "replayed")  # kept as first written
    rows = store.rounds(lid)
    assert len(rows) == 1 and rows[0].mapping == {"A": "cpu"} and rows[0].reason == "r0"


# ---- bad stores ------------------------------------------------------------------------------
def _count(path) -> int:
    return sqlite3.connect(path).execute("SELECT COUNT(*) FROM executions").fetchone()[0]


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "s.db"
    Store(p).close()
    with sqlite3.connect(p) as c:
        c.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than .* upgrade agentsched"):
        Store(p)


@pytest.mark.parametrize("content", [b"garbage, not a database" * 100, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_corrupt_store_is_refused(tmp_path, content):
    p = tmp_path / "s.db"
    p.write_bytes(content)
    with pytest.raises(StoreError, match=r"store .*s.db is corrupt or not an SQLite file") as e:
        Store(p)
    assert "\n" not in str(e.value)
    assert p.read_bytes() == content  # left untouched


def test_a_store_with_a_damaged_page_is_refused_at_open(tmp_path):
    """Before, it opened: every write failed, and each process kept its records aside and exited 0."""
    p = tmp_path / "s.db"
    Store(p).close()
    with sqlite3.connect(p) as c:  # pages beyond the schema's
        c.execute("CREATE TABLE pad (x TEXT)")
        c.executemany("INSERT INTO pad VALUES (?)", [("x" * 2000,)] * 40)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    pages = p.stat().st_size // 4096
    with open(p, "r+b") as f:
        f.seek((pages - 2) * 4096)
        f.write(b"\xab" * 4096)
    with pytest.raises(StoreError) as e:
        Store(p)
    assert str(e.value).startswith(f"store {p} is corrupt or not an SQLite file: ") and "\n" not in str(e.value)
    assert not list(tmp_path.glob("*.unwritten*"))


def test_foreign_sqlite_file_is_refused(tmp_path):
    p = tmp_path / "other.db"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE mine (x)")
    with pytest.raises(StoreError, match="not an agentsched store"):
        Store(p)


def test_locked_store_is_a_one_line_error_and_loses_nothing(tmp_path):
    p = tmp_path / "s.db"
    st = Store(p)
    lid = st.learner(load_scenario("S5"), "p", {}).id
    st.append(lid, 0, "round", 0, _execution())
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        st.busy_timeout_s = 0.2  # (the store already open, as a runtime's would be)
        st._conn.execute("PRAGMA busy_timeout = 200")
        with pytest.raises(StoreError, match=r"is locked by another process \(waited 0.2 s\)"):
            st.append(lid, 1, "round", 0, _execution())
        other = Store(p, busy_timeout_s=0.2)  # WAL: opening and reading still work
        assert len(other.executions(lid)) == 1
        with pytest.raises(StoreError, match="is locked"):
            other.add_round(lid, 0, {"A": Mode.CPU}, Status.OK, 1.0, 1, "")
        other.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _count(p) == 1
    st.append(lid, 1, "round", 0, _execution())  # usable again once the lock is gone
    assert _count(p) == 2


def test_read_only_open_refuses_writes_and_reads(tmp_path):
    p = tmp_path / "s.db"
    st = Store(p)
    lid = st.learner(load_scenario("S5"), "p", {}).id
    st.append(lid, 0, "round", 0, _execution())
    st.close()
    ro = Store(p, read_only=True)
    assert len(ro.executions(lid)) == 1
    with pytest.raises(StoreError, match="opened read-only"):
        ro.append(lid, 1, "round", 0, _execution())
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "missing.db", read_only=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_read_only_file_is_refused(tmp_path):
    p = tmp_path / "s.db"
    Store(p).close()
    p.chmod(0o444)
    with pytest.raises(StoreError, match="is read-only"):
        Store(p)


def test_store_in_a_missing_folder(tmp_path):
    with pytest.raises(StoreError, match="folder .* does not exist"):
        Store(tmp_path / "nope" / "s.db")


_WRITER = textwrap.dedent("""
    import sys
    from agentsched.model.execution import Execution, Status
    from agentsched.model.workflow import Mode
    from agentsched.scenarios import load_scenario
    from agentsched.store import Store

    st = Store(sys.argv[1])
    lid = st.learner(load_scenario("S5"), "p", {}).id
    for i in range(int(sys.argv[2])):
        seq = st.sequence_length(lid)
        x = Execution(status=Status.OK, mapping={"A": Mode.CPU}, e2e_ms=float(i), elapsed_ms=1.0,
                      peak_vram_mb=0.0, spans=())
        st.append(lid, seq, "round", 0, x)
    st.close()
""")


def test_two_processes_append_to_one_store(tmp_path):
    p = tmp_path / "s.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(p), "40"], stderr=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    conn = sqlite3.connect(p)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM executions").fetchone()[0] == 80  # nothing lost
    seqs = [r[0] for r in conn.execute("SELECT seq FROM executions WHERE seq IS NOT NULL ORDER BY seq")]
    assert seqs == list(range(len(seqs)))  # the sequence has no hole and no duplicate
    pids = {r[0] for r in conn.execute("SELECT pid FROM executions")}
    assert len(pids) == 2


def _stored_history(folder) -> str:
    """A store with one learner of S5 and one execution, closed cleanly (no -wal left)."""
    p = folder / "s.db"
    st = Store(p)
    st.append(st.learner(load_scenario("S5"), "agent-rules", {}).id, 0, "round", 0, _execution())
    st.close()
    return p


def _unwritable_folders(monkeypatch):
    """os.access as a non-root user in a read-only folder sees it (root may write anywhere)."""
    import agentsched.store.store as store_mod

    real = os.access
    monkeypatch.setattr(
        store_mod.os,
        "access",
        lambda path, mode, **kw: False if mode == os.W_OK and os.path.isdir(path) else real(path, mode),
    )


def test_a_store_in_a_folder_we_cannot_write_opens_without_creating_files(tmp_path, monkeypatch):
    p = _stored_history(tmp_path)
    _unwritable_folders(monkeypatch)
    before = sorted(x.name for x in tmp_path.iterdir())
    ro = Store(p, read_only=True)
    assert [ln.policy for ln in ro.learners("S5")] == ["agent-rules"] and len(ro.executions(1)) == 1
    ro.close()
    assert sorted(x.name for x in tmp_path.iterdir()) == before == ["s.db"]  # no -shm it could not create


def test_unmerged_wal_changes_in_a_read_only_folder_are_one_line(tmp_path, monkeypatch):
    import shutil

    writer = Store(tmp_path / "s.db")  # open: its changes stay in s.db-wal
    writer.append(writer.learner(load_scenario("S5"), "p", {}).id, 0, "round", 0, _execution())
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("s.db", "s.db-wal"):  # as a backup without the -shm file would hold it
        shutil.copy(tmp_path / name, copy / name)
    writer.close()
    _unwritable_folders(monkeypatch)
    with pytest.raises(
        StoreError,
        match=r"^store .*copy/s\.db has changes in s\.db-wal not yet in the store, and "
        "its folder is read-only: copy the store with its -wal file",
    ):
        Store(copy / "s.db", read_only=True)


def _can_bind_read_only(folder) -> bool:
    try:
        p = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && ! touch {folder}/probe",
            ],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def test_history_reads_a_store_in_a_read_only_folder(tmp_path):
    """A really read-only folder (a read-only bind mount, where even root cannot write)."""
    if not _can_bind_read_only(tmp_path):
        pytest.skip("needs unshare and mount (a read-only bind mount)")
    p = _stored_history(tmp_path)
    cmd = f"{sys.executable} -m agentsched history S5 --store {p} --json"
    run = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro {tmp_path} && exec {cmd}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert '"invocations": 1' in run.stdout


def _runtime_store(tmp_path):
    from agentsched import Runtime
    from agentsched.testbeds.sim import SimTestbed

    db = tmp_path / "s.db"
    with Runtime(load_scenario("S5"), store=db, testbed=SimTestbed(noise_sigma=0.0), round_size=2) as rt:
        for _ in range(4):
            rt.invoke()
    return db


@pytest.mark.parametrize(
    "sql, problem",
    [
        ("UPDATE executions SET mapping = '{not json' WHERE id = 2", "execution 2 is not JSON (JSONDecodeError)"),
        ('UPDATE executions SET mapping = \'{"A": "warp"}\' WHERE id = 2', "execution 2 places task 'A' on 'warp'"),
        ("UPDATE executions SET status = 'great' WHERE id = 3", "execution 3 has status 'great'"),
        ("UPDATE rounds SET e2e_ms = 'fast' WHERE round = 1", "round 1 of learner 1 has E2E 'fast', not a number"),
        ("UPDATE learners SET settings = '[1, 2]'", "learner 1's settings is a JSON list, not an object"),
        ("UPDATE executions SET mapping = '" + "[" * 100000 + "]" * 100000 + "'", "is not JSON (RecursionError)"),
    ],
)
def test_history_of_a_semantically_corrupt_store_is_one_line(tmp_path, cli, sql, problem):
    db = _runtime_store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute(sql)
    code, _, err = cli("history", "S5", "--store", str(db))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: store {db} is damaged: ") and problem in err


@pytest.mark.parametrize(
    "record, problem",
    [
        ("{not json", "execution 1 of learner 1 is not JSON (JSONDecodeError)"),
        ('{"status": "ok"}', "execution 1 of learner 1 has no field 'spans'"),
        ('{"status": "ok", "spans": [[1]], "mapping": {}}', "execution 1 of learner 1 holds a wrong value (IndexError"),
    ],
)
def test_replaying_a_corrupt_execution_record_is_one_line(tmp_path, record, problem):
    from agentsched import Runtime
    from agentsched.testbeds.sim import SimTestbed

    db = _runtime_store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE executions SET record = ? WHERE seq = 1", (record,))
    with (
        Runtime(load_scenario("S5"), store=db, testbed=SimTestbed(noise_sigma=0.0), round_size=2) as rt,
        pytest.raises(StoreError) as e,
    ):
        rt.invoke()
    assert str(e.value).startswith(f"store {db} is damaged: ") and problem in str(e.value)
