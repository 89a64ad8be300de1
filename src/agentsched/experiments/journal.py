"""The run journal: every finished run of an experiment, recorded the moment it completes, so an
interrupted bench or ablation (a crash, Ctrl-C, ``kill -9``) resumes where it stopped.

One SQLite file (standard library, WAL, one transaction per run): a ``meta`` table holding the
experiment's configuration and the agentsched version, and a ``runs`` table of zlib-compressed
pickles keyed by run (e.g. ``bench|S5|heft|3``). Runs are deterministic given their seed, so a resumed
experiment's results equal an uninterrupted one's. The pickles are this machine's own output; a
journal from another configuration or version is refused, not mixed in.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentsched.errors import AgentschedError

T = TypeVar("T")
JOURNAL_NAME = "journal.sqlite"  # inside a bench's output folder


def _version() -> str:
    from agentsched import __version__

    return __version__


class RunJournal:
    """Finished runs of one experiment (see the module docstring). Not shared between threads."""

    def __init__(self, path: str | Path, config: dict[str, Any], *, resume: bool = False) -> None:
        self.path = Path(path)
        self.config_json = json.dumps(config, sort_keys=True, default=str)
        self.resumed = 0  # runs taken from the journal instead of being run again
        if not resume and self.path.exists() and self.path.stat().st_size > 0:
            self._check_is_journal()  # never replace a file that holds something else (an empty one holds nothing)
            self._remove()
        try:
            self._db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, payload BLOB NOT NULL)")
            self._check_or_write_meta()
        except sqlite3.DatabaseError as e:
            raise AgentschedError(f"run journal {self.path}: unusable ({e}); remove it or run without --resume") from None

    def _check_is_journal(self) -> None:
        """Raise unless ``self.path`` is a run journal (a SQLite file with exactly our two tables)."""
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0) as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError:
            tables = set()
        if tables != {"meta", "runs"}:
            raise AgentschedError(f"run journal {self.path}: the file exists and is not a run journal; "
                                  "choose another path (it was left untouched)")

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            p = Path(f"{self.path}{suffix}")
            try:
                p.unlink(missing_ok=True)
            except OSError as e:
                raise AgentschedError(f"run journal {p}: cannot remove the old one ({e.strerror})") from None

    def _check_or_write_meta(self) -> None:
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not rows:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO meta VALUES (?, ?)",
                                     [("config", self.config_json), ("version", _version())])
            return
        if rows.get("version") != _version():
            raise AgentschedError(f"run journal {self.path} was written by agentsched {rows.get('version')}, "
                                  f"this is {_version()}: it cannot be resumed; run without --resume")
        if rows.get("config") != self.config_json:
            raise AgentschedError(f"run journal {self.path} belongs to a different experiment (other scenarios, "
                                  "policies, seeds or options): resume with the same options, or run without --resume")

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def get(self, key: str) -> Any | None:
        """The stored result of run ``key``, or None when it has not finished yet."""
        row = self._db.execute("SELECT payload FROM runs WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return pickle.loads(zlib.decompress(row[0]))
        except Exception as e:  # noqa: BLE001 - a damaged row: say which, never guess
            raise AgentschedError(f"run journal {self.path}: run {key} is unreadable ({type(e).__name__}); "
                                  "run without --resume") from None

    def put(self, key: str, value: Any) -> None:
        """Record run ``key`` (committed before returning: a kill after this keeps it)."""
        payload = zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?)", (key, payload))

    def cached(self, key: str, compute: Callable[[], T]) -> T:
        """The stored result of ``key``, else ``compute()`` recorded under it."""
        found = self.get(key)
        if found is not None:
            self.resumed += 1
            return found
        value = compute()
        self.put(key, value)
        return value

    def close(self) -> None:
        self._db.close()


def journaled(journal: RunJournal | None, key: str, compute: Callable[[], T]) -> T:
    """``compute()`` through ``journal`` when there is one."""
    return compute() if journal is None else journal.cached(key, compute)
