"""A store file's SQLite connection: opening it (checks, WAL, schema), waiting for another process's
lock, bounding how long one query may run, transactions, and SQLite's errors as one line.

Concurrency: every write is one short transaction (``BEGIN IMMEDIATE``) and readers never block
writers (WAL); a busy store is waited for ``busy_timeout_s``. A store that is locked past the
timeout, read-only, corrupt, not an agentsched store, holds objects agentsched never creates
(``store/schema.py``), or is from a newer schema is a one-line ``StoreError``. A read that runs
past ``query_limit_s`` (a crafted store) is stopped and is one too; Ctrl-C stops one at once.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agentsched.errors import StoreError
from agentsched.store import schema

DEFAULT_BUSY_TIMEOUT_S = 30.0
DEFAULT_QUERY_LIMIT_S = 120.0  # one read (or one row of a long read) of a sound store takes far less
BUSY_RETRY_S = 0.02  # between tries of a step SQLite answered busy without waiting (_waiting)
WAIT_NOTICE_S = 2.0  # a lock wait longer than this is announced (on_wait, else a logged warning)
PROGRESS_STEPS = 20_000  # SQLite VM steps between two looks at the query's deadline (well under 1 ms)
log = logging.getLogger("agentsched.store")

EMPTY = "is empty (no runtime has written to it yet)"  # a store file with nothing in it (store commands too)


def _set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {max(0, round(seconds * 1000))}")


def _uri(path: Path, query: str) -> str:
    """An SQLite URI of ``path``: the path percent-escaped, else a ``?`` or ``#`` in it would start
    the URI's query or fragment (and ``%`` an escape), opening another file than the one named."""
    return f"file:{quote(str(path))}?{query}"


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Database:
    """One SQLite store file's connection. Thread-safe (one connection, serialised); many processes may share it."""

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        on_wait: Callable[[str], None] | None = None,
        wait_notice_s: float | None = None,
        query_limit_s: float = DEFAULT_QUERY_LIMIT_S,
    ) -> None:
        self.path = Path(path)  # the store file
        self.read_only = read_only  # open for reading only (history)
        self.busy_timeout_s = busy_timeout_s  # how long a busy store is waited for
        self.on_wait = on_wait  # told (one line) when a lock wait passes wait_notice_s; None: logged
        # read at construction, not at import: tests and callers may lower the module's threshold
        self.wait_notice_s = WAIT_NOTICE_S if wait_notice_s is None else wait_notice_s
        self.query_limit_s = query_limit_s  # one read (one row of a streamed read) stopped past this
        self._deadline: float | None = None  # when the running read is stopped (monotonic s); None: not bounded
        self._lock = threading.Lock()
        self._patience = threading.local()  # this thread's shorter wait (waiting_at_most), if any
        self._conn = self._open()
        self._conn.set_progress_handler(self._past_deadline, PROGRESS_STEPS)

    def _past_deadline(self) -> int:
        """SQLite's progress handler: non-zero stops the running statement ("interrupted")."""
        return int(self._deadline is not None and time.monotonic() > self._deadline)

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
                    (self.on_wait or log.warning)(
                        f"waiting for the store {self.path} (locked by another process) for up to {limit:g} s ..."
                    )
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

    # ---- errors ----------------------------------------------------------------------------
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

    # ---- opening ---------------------------------------------------------------------------
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
            conn = sqlite3.connect(
                uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
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
        raise self._fail(
            f"has changes in {wal.name} not yet in the store, and its folder is read-only: "
            "copy the store with its -wal file to a writable folder to read it"
        )

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check (and on first use create) the schema; switch to WAL. Repeatable (a lock wait
        past the notice threshold runs it again)."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "schema_version" not in tables:
            raise self._fail("is an SQLite file but not an agentsched store (no schema_version table)")
        foreign = schema.foreign_objects(conn)
        if foreign is not None:
            raise self._fail(
                f"holds what agentsched never creates ({foreign}): refused, it was made or changed "
                "by something else (remove them with the sqlite3 shell, or use another store)"
            )
        if not self.read_only:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise self._fail(f"cannot use WAL mode (journal mode {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            if not tables:
                schema.create(conn)
            else:  # why: a damaged page opened fine, every write then failed, and each process kept its
                # records aside and exited 0 (it reads every page: 0.36 s for a 387 MB file here)
                problem = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if problem != "ok":  # (SQLite's text: "*** in database main ***\nPage 12: ...")
                    found = " ".join(str(problem).replace("*** in database main ***", "").split())
                    raise self._fail(f"is corrupt or not an SQLite file: {found}")
        elif not tables:
            raise self._fail(EMPTY)
        problem = schema.version_problem(conn)
        if problem is not None:
            raise self._fail(problem)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- transactions and reads --------------------------------------------------------------
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
        with self._lock, self._bounded():
            return self._conn.execute(sql, args).fetchall()

    def _column_bytes(self, table: str, column: str, rowid: int) -> int:
        """How many bytes one row's column holds (read from SQLite's record, not the value)."""
        with self._lock, self._bounded(), self._conn.blobopen(table, column, rowid, readonly=True) as blob:
            return len(blob)

    def _column_chunks(self, table: str, column: str, rowid: int, chunk_bytes: int) -> Iterator[bytes]:
        """One row's column in pieces of ``chunk_bytes``: a large value is never held whole."""
        offset = 0
        while True:
            with self._lock, self._bounded(), self._conn.blobopen(table, column, rowid, readonly=True) as blob:
                blob.seek(offset)
                piece = blob.read(chunk_bytes)
            if not piece:
                return
            offset += len(piece)
            yield piece

    @contextmanager
    def _bounded(self) -> Iterator[None]:
        """The statements run inside stop once ``query_limit_s`` has passed; SQLite's errors as one line."""
        self._deadline = time.monotonic() + self.query_limit_s
        try:
            yield
        except sqlite3.OperationalError as e:
            if str(e) != "interrupted":
                raise self._translate(e) from None
            if time.monotonic() <= self._deadline:  # Ctrl-C: SQLite stopped for the signal, not the deadline
                raise KeyboardInterrupt from None
            raise self._fail(
                f"took more than {self.query_limit_s:g} s to answer one read: stopped (a store this "
                "slow to read was likely crafted or damaged)"
            ) from None
        except sqlite3.Error as e:
            raise self._translate(e) from None
        finally:
            self._deadline = None

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
