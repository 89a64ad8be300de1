"""The persistent store: one SQLite file (standard library ``sqlite3``, WAL mode) that keeps what a
runtime learned, so a new process resumes where the last one stopped.

Tables (schema version ``SCHEMA_VERSION``, recorded in ``schema_version``):

* ``workflows`` (content hash -> name, JSON) and ``card_sets`` (hash of the cards a policy sees ->
  JSON): what a learner is keyed by;
* ``learners``: one per (workflow hash, card hash, policy, settings): its id and key;
* ``executions``: every execution of a learner, append-only: its place ``seq`` in the learner's
  sequence (NULL for an execution another process had already recorded at that place), kind
  (round run or probe), round, mapping, status, E2E, message and the full record (per-task
  timings) at full float precision;
* ``rounds``: one row per observed round (mapping, status, median E2E, what the policy said);
* ``contention``: the load-aware planner's learned (s, p) and measured ratio per unit tool and card,
  replaced on save (``store/contention.py``).

Concurrency: every write is one short transaction (``BEGIN IMMEDIATE``) and readers never block
writers (WAL); a busy store is waited for ``busy_timeout_s``. Nothing else is ever updated, and only
``forget`` deletes (a whole learner, in one transaction), so a failure costs at most the write that
failed. A store that is locked past the timeout,
read-only, corrupt, not an agentsched store, or from a newer schema is a one-line ``StoreError``.
Records a runtime kept on disk while the store refused them (``store/unwritten.py``) are written
when a store is next opened for writing (``write_unwritten``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from agentsched.errors import StoreError
from agentsched.store import decode
from agentsched.store.contention import CONTENTION_TABLE, ContentionTable
from agentsched.store.records import cards_doc, digest, execution_from_doc, execution_to_doc, workflow_doc
from agentsched.store.unwritten import UnwrittenRecords
from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode, Workflow

SCHEMA_VERSION = 1
DEFAULT_BUSY_TIMEOUT_S = 30.0
BUSY_RETRY_S = 0.02  # between tries of a step SQLite answered busy without waiting (_waiting)
UNWRITTEN_WAIT_S = 1.0  # opening a store waits this long at most to write records kept while it refused them
WAIT_NOTICE_S = 2.0  # a lock wait longer than this is announced (on_wait, else a logged warning)
log = logging.getLogger("agentsched.store")
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS card_sets (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS learners (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, workflow_hash TEXT NOT NULL,
    workflow_name TEXT NOT NULL, card_hash TEXT NOT NULL, policy TEXT NOT NULL,
    settings TEXT NOT NULL, created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, learner_id INTEGER NOT NULL REFERENCES learners(id),
    seq INTEGER, kind TEXT NOT NULL, round INTEGER, mapping TEXT NOT NULL, status TEXT NOT NULL,
    e2e_ms REAL, message TEXT NOT NULL, record TEXT NOT NULL, pid INTEGER NOT NULL,
    created_s REAL NOT NULL, UNIQUE (learner_id, seq));
CREATE TABLE IF NOT EXISTS rounds (
    learner_id INTEGER NOT NULL REFERENCES learners(id), round INTEGER NOT NULL,
    mapping TEXT NOT NULL, status TEXT NOT NULL, e2e_ms REAL, executions_after INTEGER NOT NULL,
    reason TEXT NOT NULL, created_s REAL NOT NULL, PRIMARY KEY (learner_id, round));
"""
_SCHEMA += CONTENTION_TABLE + ";\n"


# ---- rows ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LearnerRow:
    """One learner: a workflow under a card set, learned by one policy with one set of settings."""

    id: int
    key: str
    workflow_name: str
    workflow_hash: str
    card_hash: str
    policy: str
    settings: dict[str, Any]
    created_s: float


@dataclass(frozen=True)
class ExecutionRow:
    """One stored execution (an invocation of a runtime)."""

    id: int  # the invocation id
    learner_id: int
    seq: int | None  # place in the learner's sequence; None: recorded by another process first
    kind: str  # "round" or "probe"
    round: int | None
    mapping: dict[str, str]
    status: str
    e2e_ms: float | None
    message: str
    created_s: float

    def execution(self, record: str) -> Execution:
        return decode.execution(record, f"execution {self.id}", execution_from_doc)


@dataclass(frozen=True)
class RoundRow:
    """One observed round of a learner."""

    learner_id: int
    round: int
    mapping: dict[str, str]
    status: str
    e2e_ms: float | None
    executions_after: int
    reason: str
    created_s: float


def _set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {max(0, round(seconds * 1000))}")


def _uri(path: Path, query: str) -> str:
    """An SQLite URI of ``path``: the path percent-escaped, else a ``?`` or ``#`` in it would start
    the URI's query or fragment (and ``%`` an escape), opening another file than the one named."""
    return f"file:{quote(str(path))}?{query}"


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


EMPTY = "is empty (no runtime has written to it yet)"  # a store file with nothing in it (store commands too)


class Store(ContentionTable, UnwrittenRecords):
    """One SQLite store file. Thread-safe (one connection, serialised); many processes may share it."""

    def __init__(self, path: str | Path, *, read_only: bool = False,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S, on_wait: Callable[[str], None] | None = None,
                 wait_notice_s: float | None = None) -> None:
        self.path = Path(path)  # the store file
        self.read_only = read_only  # open for reading only (history)
        self.busy_timeout_s = busy_timeout_s  # how long a busy store is waited for
        self.on_wait = on_wait  # told (one line) when a lock wait passes wait_notice_s; None: logged
        # read at construction, not at import: tests and callers may lower the module's threshold
        self.wait_notice_s = WAIT_NOTICE_S if wait_notice_s is None else wait_notice_s
        self._lock = threading.Lock()
        self._patience = threading.local()  # this thread's shorter wait (waiting_at_most), if any
        self._conn = self._open()
        if not read_only:  # records kept on disk while it refused them, written first (a short wait)
            with self.waiting_at_most(UNWRITTEN_WAIT_S):
                self.write_unwritten()

    def _waiting(self, conn: sqlite3.Connection, step: Callable[[], Any]) -> Any:
        """Run ``step``, which may wait for another process's lock, for up to ``busy_timeout_s`` in
        all. SQLite's busy handler waits silently, which looks like a hang, so a wait past
        ``wait_notice_s`` is announced once (``on_wait``, else a logged warning). Some conflicts
        SQLite answers busy at once without waiting (switching a new store to WAL while another
        process holds its write lock: the first use of one store by two processes); ``step`` is
        then tried again after ``BUSY_RETRY_S`` until the timeout, so "waited N s" is true."""
        start, noticed, limit = time.monotonic(), False, self._wait_limit_s()
        try:
            while True:
                elapsed = time.monotonic() - start
                until = limit if noticed else min(self.wait_notice_s, limit)
                _set_busy_timeout(conn, max(0.0, until - elapsed))
                try:
                    return step()
                except sqlite3.OperationalError as e:
                    elapsed = time.monotonic() - start
                    if not _is_busy(e) or elapsed >= limit:
                        raise
                if not noticed and elapsed >= self.wait_notice_s:
                    noticed = True
                    (self.on_wait or log.warning)(f"waiting for the store {self.path} (locked by another process) "
                                                  f"for up to {limit:g} s ...")
                time.sleep(min(BUSY_RETRY_S, max(0.0, limit - elapsed)))
        finally:
            _set_busy_timeout(conn, self.busy_timeout_s)

    @contextmanager
    def waiting_at_most(self, seconds: float) -> Iterator[None]:
        """This thread's writes wait for another process's lock at most ``seconds`` (a retry of a
        write the store refused: it must not hold an invocation for the whole busy timeout)."""
        self._patience.s = seconds
        try:
            yield
        finally:
            self._patience.s = None

    def _wait_limit_s(self) -> float:
        s = getattr(self._patience, "s", None)
        return self.busy_timeout_s if s is None else min(s, self.busy_timeout_s)

    # ---- opening ---------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException | None = None, transient: bool = False) -> StoreError:
        reason = f": {exc}" if exc is not None and str(exc) else ""
        error = StoreError(f"store {self.path} {what}{reason}")
        error.transient = transient
        return error

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            return self._fail(f"is locked by another process (waited {self._wait_limit_s():g} s)", transient=True)
        if "readonly" in text or "read-only" in text:
            return self._fail("is read-only (check the file's and its folder's permissions)", transient=True)
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return self._fail("is corrupt or not an SQLite file", exc)
        if "unable to open" in text:
            return self._fail("cannot be opened (missing folder or no permission)")
        if "disk" in text and ("full" in text or "i/o" in text):
            return self._fail("cannot be written", exc, transient=True)
        return self._fail("failed", exc)

    def _open(self) -> sqlite3.Connection:
        p = self.path
        if p.exists() and not p.is_file():
            raise self._fail("is not a regular file")
        if self.read_only:
            if not p.exists():
                raise self._fail("does not exist")
            uri = self._read_only_uri()
        else:
            if not p.parent.is_dir():
                raise self._fail(f"cannot be created: folder {p.parent} does not exist")
            if p.exists() and not os.access(p, os.W_OK):
                raise self._fail("is read-only (check the file's permissions; `history` can read it)")
            if not p.exists() and not os.access(p.parent, os.W_OK):
                raise self._fail(f"cannot be created: folder {p.parent} is read-only")
            uri = _uri(p.resolve(), "mode=rwc")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise self._translate(e) from None
        try:
            self._waiting(conn, lambda: self._prepare(conn))
        except sqlite3.Error as e:
            conn.close()
            raise self._translate(e) from None
        except StoreError:
            conn.close()
            raise
        return conn

    def _read_only_uri(self) -> str:
        """How to read the store. Reading a WAL store creates its ``-shm`` file, impossible in a folder
        we cannot write in: there a store whose ``-wal`` holds nothing is opened immutable (its
        file is the whole of it); a ``-wal`` with content is read through its existing ``-shm``."""
        p = self.path.resolve()
        if os.access(p.parent, os.W_OK):
            return _uri(p, "mode=ro")
        wal, shm = Path(f"{p}-wal"), Path(f"{p}-shm")
        if not wal.exists() or wal.stat().st_size == 0:
            return _uri(p, "mode=ro&immutable=1")
        if shm.exists():
            return _uri(p, "mode=ro")
        raise self._fail(f"has changes in {wal.name} not yet in the store, and its folder is read-only: "
                         "copy the store with its -wal file to a writable folder to read it")

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check (and on first use create) the schema; switch to WAL. Repeatable (a lock wait
        past the notice threshold runs it again)."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "schema_version" not in tables:
            raise self._fail("is an SQLite file but not an agentsched store (no schema_version table)")
        if not self.read_only:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise self._fail(f"cannot use WAL mode (journal mode {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            if not tables:
                self._create(conn)
            else:  # why: a damaged page opened fine, every write then failed, and each process kept its
                # records aside and exited 0 (it reads every page: 0.36 s for a 387 MB file here)
                problem = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if problem != "ok":  # (SQLite's text: "*** in database main ***\nPage 12: ...")
                    found = " ".join(str(problem).replace("*** in database main ***", "").split())
                    raise self._fail(f"is corrupt or not an SQLite file: {found}")
        elif not tables:
            raise self._fail(EMPTY)
        self._check_version(conn)

    def _create(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            present = conn.execute("SELECT name FROM sqlite_master WHERE name = 'schema_version'").fetchone()
            if present is None:  # another process may have created it while we waited
                for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                    conn.execute(stmt)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _check_version(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        version = row[0] if row else None
        if version is None:
            raise self._fail("has no schema version (not an agentsched store, or corrupt)")
        if version > SCHEMA_VERSION:
            raise self._fail(f"has schema version {version}, newer than this agentsched's {SCHEMA_VERSION}: "
                             "upgrade agentsched to use it")
        if version < SCHEMA_VERSION:  # no older schema exists yet; a migration would go here
            raise self._fail(f"has unknown old schema version {version}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- transactions ----------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise self._fail("was opened read-only")
        with self._lock:
            try:
                self._waiting(self._conn, lambda: self._conn.execute("BEGIN IMMEDIATE"))
            except sqlite3.Error as e:
                raise self._translate(e) from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._conn.execute("ROLLBACK")
                raise
            except sqlite3.Error as e:
                self._rollback()
                raise self._translate(e) from None
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise self._translate(e) from None

    # ---- learners --------------------------------------------------------------------------
    def learner(self, wf: Workflow, policy: str, settings: Mapping[str, Any]) -> LearnerRow:
        """The learner of ``wf`` (its content and cards) under ``policy`` and ``settings``,
        created on first use. Records the workflow and its cards."""
        wdoc, cdoc = workflow_doc(wf), cards_doc(wf)
        whash, chash = digest(wdoc), digest(cdoc)
        settings = dict(settings)
        key = digest({"workflow": whash, "cards": chash, "policy": policy, "settings": settings})
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO workflows (hash, name, doc) VALUES (?, ?, ?)",
                      (whash, wf.name, json.dumps(wdoc)))
            c.execute("INSERT OR IGNORE INTO card_sets (hash, name, doc) VALUES (?, ?, ?)",
                      (chash, cdoc["name"], json.dumps(cdoc)))
            c.execute("INSERT OR IGNORE INTO learners (key, workflow_hash, workflow_name, card_hash, policy, "
                      "settings, created_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (key, whash, wf.name, chash, policy, json.dumps(settings, sort_keys=True), time.time()))
        rows = self._read("SELECT id, key, workflow_name, workflow_hash, card_hash, policy, settings, created_s "
                          "FROM learners WHERE key = ?", (key,))
        return self._learner(rows[0])

    def learners(self, workflow: str | None = None) -> list[LearnerRow]:
        """Every learner, or those of one workflow (by name or content hash), oldest first."""
        sql = "SELECT id, key, workflow_name, workflow_hash, card_hash, policy, settings, created_s FROM learners"
        args: tuple = ()
        if workflow is not None:
            sql += " WHERE workflow_name = ? OR workflow_hash = ?"
            args = (workflow, workflow)
        return [self._learner(r) for r in self._read(sql + " ORDER BY id", args)]

    def forget(self, learner_id: int) -> int:
        """Delete a learner with its executions and rounds (the next runtime with its key starts
        afresh); returns how many executions went. Its workflow and card records stay (shared)."""
        with self._write() as c:
            gone = c.execute("DELETE FROM executions WHERE learner_id = ?", (learner_id,)).rowcount
            c.execute("DELETE FROM rounds WHERE learner_id = ?", (learner_id,))
            if c.execute("DELETE FROM learners WHERE id = ?", (learner_id,)).rowcount == 0:
                raise self._fail(f"has no learner {learner_id}")
        return int(gone)

    def workflow_doc(self, whash: str) -> dict[str, Any] | None:
        rows = self._read("SELECT doc FROM workflows WHERE hash = ?", (whash,))
        return self._decoded(decode.loads_object, rows[0][0], f"workflow {whash}") if rows else None

    def card_doc(self, chash: str) -> dict[str, Any] | None:
        rows = self._read("SELECT doc FROM card_sets WHERE hash = ?", (chash,))
        return self._decoded(decode.loads_object, rows[0][0], f"card set {chash}") if rows else None

    # ---- executions ------------------------------------------------------------------------
    def execution_at(self, learner_id: int, seq: int) -> Execution | None:
        """The execution recorded at place ``seq`` of a learner's sequence, if any."""
        rows = self._read("SELECT record FROM executions WHERE learner_id = ? AND seq = ?", (learner_id, seq))
        return self._decoded(decode.execution, rows[0][0], f"execution {seq} of learner {learner_id}",
                             execution_from_doc) if rows else None

    def append(self, learner_id: int, seq: int | None, kind: str, round_index: int | None,
               x: Execution) -> tuple[int, bool]:
        """Record ``x`` at place ``seq`` (None: outside the sequence). Returns (its id, whether it
        took place ``seq``): when another process recorded place ``seq`` first, ``x`` is still
        kept, outside the sequence."""
        with self._write() as c:
            return self._insert_execution(c, learner_id, seq, kind, round_index, x)

    def _insert_execution(self, c: sqlite3.Connection, learner_id: int, seq: int | None, kind: str,
                          round_index: int | None, x: Execution) -> tuple[int, bool]:
        doc = execution_to_doc(x)
        row = (learner_id, kind, round_index, json.dumps(doc["mapping"]), x.status.value,
               x.e2e_ms if x.e2e_ms is not None and math.isfinite(x.e2e_ms) else None, x.message,
               json.dumps(doc), os.getpid(), time.time())
        sql = ("INSERT INTO executions (learner_id, seq, kind, round, mapping, status, e2e_ms, message, record, "
               "pid, created_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        if seq is not None:
            try:  # (a failed INSERT undoes only itself: the transaction goes on)
                return int(c.execute(sql, (row[0], seq, *row[1:])).lastrowid), True
            except sqlite3.IntegrityError:
                pass  # place taken by another process: keep ours outside the sequence
        return int(c.execute(sql, (row[0], None, *row[1:])).lastrowid), False

    def executions(self, learner_id: int, limit: int | None = None) -> list[ExecutionRow]:
        """Every execution of a learner (or its newest ``limit``, read with SQL LIMIT), oldest first."""
        cols = "id, learner_id, seq, kind, round, mapping, status, e2e_ms, message, created_s"
        sql, args = f"SELECT {cols} FROM executions WHERE learner_id = ? ORDER BY id", (learner_id,)
        if limit is not None:
            sql, args = f"SELECT * FROM ({sql} DESC LIMIT ?) ORDER BY id", (learner_id, limit)
        rows = self._read(sql, args)
        return [ExecutionRow(r[0], r[1], r[2], r[3], r[4], self._decoded(decode.mapping, r[5], f"execution {r[0]}"),
                             self._decoded(decode.status, r[6], f"execution {r[0]}"),
                             self._decoded(decode.e2e, r[7], f"execution {r[0]}"), r[8], r[9]) for r in rows]

    def vacuum(self) -> None:
        """SQLite ``VACUUM`` (all or nothing, waits for writers as a write does), then empty the WAL."""
        if self.read_only:
            raise self._fail("was opened read-only")
        with self._lock:
            try:
                self._waiting(self._conn, lambda: self._conn.execute("VACUUM"))
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                raise self._translate(e) from None

    def sequence_length(self, learner_id: int, *, outside: bool = False) -> int:
        """Executions in the learner's sequence (``outside``: those kept outside it: pinned, live, cut)."""
        rows = self._read(f"SELECT COUNT(*) FROM executions WHERE learner_id = ? AND seq IS {'' if outside else 'NOT '}"
                          "NULL", (learner_id,))
        return int(rows[0][0])

    # ---- rounds ----------------------------------------------------------------------------
    def add_round(self, learner_id: int, round_index: int, mapping: Mapping[str, Mode], status: Status,
                  e2e_ms: float | None, executions_after: int, reason: str) -> None:
        """Record an observed round (a round already recorded, e.g. by a replay, is kept as is)."""
        with self._write() as c:
            self._insert_round(c, learner_id, round_index, {t: m.value for t, m in mapping.items()}, status.value,
                               e2e_ms, executions_after, reason)

    @staticmethod
    def _insert_round(c: sqlite3.Connection, learner_id: int, round_index: int, mapping: Mapping[str, str],
                      status: str, e2e_ms: float | None, executions_after: int, reason: str) -> None:
        c.execute("INSERT OR IGNORE INTO rounds (learner_id, round, mapping, status, e2e_ms, executions_after, "
                  "reason, created_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  (learner_id, round_index, json.dumps(dict(mapping)), status, e2e_ms, executions_after, reason,
                   time.time()))

    def rounds(self, learner_id: int) -> list[RoundRow]:
        rows = self._read("SELECT learner_id, round, mapping, status, e2e_ms, executions_after, reason, created_s "
                          "FROM rounds WHERE learner_id = ? ORDER BY round", (learner_id,))
        return [RoundRow(r[0], r[1], self._decoded(decode.mapping, r[2], f"round {r[1]} of learner {r[0]}"),
                         self._decoded(decode.status, r[3], f"round {r[1]} of learner {r[0]}"),
                         self._decoded(decode.e2e, r[4], f"round {r[1]} of learner {r[0]}"), r[5], r[6], r[7])
                for r in rows]

    def _learner(self, r: tuple) -> LearnerRow:
        return LearnerRow(r[0], r[1], r[2], r[3], r[4], r[5], self._decoded(decode.loads_object, r[6],
                                                                             f"learner {r[0]}'s settings"), r[7])

    def _decoded(self, how: Callable[..., T], value: Any, what: str, *args: Any) -> T:
        """``how(value, what, *args)``; a row it cannot read is this store's one-line error."""
        try:
            return how(value, what, *args)
        except decode.RowError as e:
            raise self._fail(f"is damaged: {e}") from None

