"""A store locked by another process: the wait is announced once it passes the notice threshold,
and ends in the one-line error at the busy timeout (or in success when the lock is released)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from agentsched.errors import StoreError
from agentsched.scenarios import load_scenario
from agentsched.store import Store


def _hold_lock(path: Path) -> sqlite3.Connection:
    """Another writer holding the store's write lock (as a second process would)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "s.db"
    Store(path).close()
    return path


def test_a_long_wait_is_announced_then_fails_in_one_line(db):
    holder = _hold_lock(db)
    notes: list[str] = []
    try:
        st = Store(db, busy_timeout_s=0.6, wait_notice_s=0.1, on_wait=notes.append)
        with pytest.raises(StoreError, match=r"^store .*s\.db is locked by another process \(waited 0\.6 s\)$"):
            st.learner(load_scenario("S5"), "agent-rules", {})
        st.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert notes == [f"waiting for the store {db} (locked by another process) for up to 0.6 s ..."]


def _learner_once_released(path: Path, holder: sqlite3.Connection, after_s: float) -> list[str]:
    """Open ``path`` and add a learner while ``holder`` keeps its lock for ``after_s``; the notices."""
    notes: list[str] = []
    release = threading.Timer(after_s, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        st = Store(path, busy_timeout_s=10, wait_notice_s=0.1, on_wait=notes.append)
        assert st.learner(load_scenario("S5"), "agent-rules", {}).id == 1
        st.close()
    finally:
        release.join()
        holder.close()
    return notes


def test_the_wait_ends_when_the_lock_is_released(db):
    notes = _learner_once_released(db, _hold_lock(db), 0.5)
    assert len(notes) == 1 and notes[0].startswith(f"waiting for the store {db} (locked by another process)")


def test_no_notice_without_a_wait(db):
    notes: list[str] = []
    st = Store(db, wait_notice_s=0.0, on_wait=notes.append)  # any lock wait at all would be announced
    st.learner(load_scenario("S5"), "agent-rules", {})
    st.close()
    assert notes == []  # the timer is cancelled as soon as the lock is had


def test_without_a_callback_the_notice_is_logged(db, caplog):
    holder = _hold_lock(db)
    try:
        st = Store(db, busy_timeout_s=0.4, wait_notice_s=0.05)
        with pytest.raises(StoreError):
            st.learner(load_scenario("S5"), "agent-rules", {})
        st.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert any("waiting for the store" in r.getMessage() for r in caplog.records)


def _new_store_being_created(tmp_path) -> tuple[Path, sqlite3.Connection]:
    """A new store whose first writer holds the write lock mid-creation (the other of two processes
    using one new store at once): switching to WAL is answered busy at once, without SQLite's wait."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE scratch (x)")
    return path, holder


def test_a_new_store_locked_at_creation_is_waited_for(tmp_path):
    notes = _learner_once_released(*_new_store_being_created(tmp_path), 0.4)
    assert len(notes) == 1  # announced once, not failed at once with a "waited 10 s" it did not wait


def test_a_new_store_locked_past_the_timeout_fails_after_waiting_it(tmp_path):
    path, holder = _new_store_being_created(tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(StoreError, match=r"is locked by another process \(waited 0\.5 s\)$"):
            Store(path, busy_timeout_s=0.5, wait_notice_s=0.1, on_wait=lambda _: None)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert time.monotonic() - start >= 0.5  # the message's wait is the wait that happened
