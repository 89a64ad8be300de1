"""The run journal: every finished run of an experiment, recorded the moment it completes, so an
interrupted bench or ablation (a crash, Ctrl-C, ``kill -9``) resumes where it stopped.

One SQLite file (standard library, WAL, one transaction per run): a ``meta`` table holding the
experiment's configuration, the agentsched version and the row format, and a ``runs`` table of JSON
records keyed by run (e.g. ``bench|S5|heft|3``; the format is in ``journal_codec``), each compressed
(zlib: a record's per-execution spans repeat, and the default bench's journal took 54 MB). Rows are data,
never pickles: a journal is a file a user may be handed, and reading it must never run code. Runs
are deterministic given their seed, so a resumed experiment's results equal an uninterrupted one's.
A journal from another configuration, version or row format is refused, not mixed in.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from agentsched.errors import AgentschedError
from agentsched.experiments.journal_codec import ROW_FORMAT, JournalRowError, decode, encode, fits

T = TypeVar("T")
JOURNAL_NAME = "journal.sqlite"  # inside a bench's output folder
FINISHED = "finished"  # the meta key an experiment that ran to its end writes
MARKS_END = "marks_end"  # the meta key of a journal that will say when it finished (written at creation)
MAX_ROW_BYTES = 256 << 20  # a row that decompresses past this is refused (a crafted journal's bomb)


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
            self._check_not_unfinished()
            self._remove()
        try:
            self._db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, payload BLOB NOT NULL)")
            self._check_or_write_meta()
        except sqlite3.DatabaseError as e:
            raise AgentschedError(
                f"run journal {self.path}: unusable ({e}); remove it or run without --resume"
            ) from None

    def _check_is_journal(self) -> None:
        """Raise unless ``self.path`` is a run journal (a SQLite file with exactly our two tables)."""
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0) as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError:
            tables = set()
        if tables != {"meta", "runs"}:
            raise AgentschedError(
                f"run journal {self.path}: the file exists and is not a run journal; "
                "choose another path (it was left untouched)"
            )

    def _check_not_unfinished(self) -> None:
        """Raise when ``self.path`` holds finished runs of this same experiment, which never ended: a
        run without ``--resume`` would throw them away (a re-run forgetting the flag wiped 109 runs)."""
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0) as db:
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
                runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise AgentschedError(f"run journal {self.path}: unreadable ({e}); remove it to start again") from None
        same = (meta.get("config"), meta.get("version"), meta.get("format")) == (
            self.config_json,
            _version(),
            ROW_FORMAT,
        )
        # (a journal written before the end was marked has no MARKS_END: it is replaced, as before)
        if same and runs and MARKS_END in meta and FINISHED not in meta:
            raise AgentschedError(
                f"run journal {self.path} holds {runs} finished runs of this experiment, which "
                "did not finish: add --resume to continue it, or remove the file to start again"
            )

    def finish(self) -> None:
        """Mark the experiment complete: a later run of it without ``--resume`` starts again."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (FINISHED, "1"))

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
                self._db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("config", self.config_json), ("version", _version()), ("format", ROW_FORMAT), (MARKS_END, "1")],
                )
            return
        if rows.get("format") != ROW_FORMAT:  # e.g. the pickled rows of earlier versions: never read them
            raise AgentschedError(
                f"run journal {self.path} holds rows in another format "
                f"({str(rows.get('format', 'pickle'))[:40]}, this is {ROW_FORMAT}): "
                "it cannot be resumed; run without --resume"
            )
        if rows.get("version") != _version():
            raise AgentschedError(
                f"run journal {self.path} was written by agentsched {rows.get('version')}, "
                f"this is {_version()}: it cannot be resumed; run without --resume"
            )
        if rows.get("config") != self.config_json:
            raise AgentschedError(
                f"run journal {self.path} belongs to a different experiment (other scenarios, "
                "policies, seeds or options): resume with the same options, or run without --resume"
            )

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def get(self, key: str, expect: Any = Any, workflows: Mapping[str, Any] | None = None) -> Any | None:
        """The stored result of run ``key``, or None when it has not finished yet.

        ``expect``: the type the result must have (a type hint); ``workflows``: by name, for the
        workflows a result refers to."""
        row = self._db.execute("SELECT payload FROM runs WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            if not isinstance(row[0], bytes):
                raise JournalRowError(f"holds a {type(row[0]).__name__}, not a compressed JSON record")
            value = decode(_inflate(row[0]), workflows)
            if not fits(value, expect):
                raise JournalRowError(f"holds a {type(value).__name__}, not the expected {expect}")
        except JournalRowError as e:  # a damaged or crafted row: say which, never guess
            raise AgentschedError(
                f"run journal {self.path}: run {key} is unreadable ({e}); run without --resume"
            ) from None
        return value

    def put(self, key: str, value: Any) -> None:
        """Record run ``key`` (committed before returning: a kill after this keeps it)."""
        try:
            payload = zlib.compress(encode(value).encode("utf-8"), 6)
        except TypeError as e:
            raise AgentschedError(f"run journal {self.path}: run {key} cannot be recorded ({e})") from None
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?)", (key, payload))

    def cached(self, key: str, compute: Callable[[], T], expect: Any = Any) -> T:
        """The stored result of ``key`` (of type ``expect``), else ``compute()`` recorded under it."""
        found = self.get(key, expect)
        if found is not None:
            self.resumed += 1
            return found
        value = compute()
        self.put(key, value)
        return value

    def close(self) -> None:
        self._db.close()


def _inflate(payload: bytes) -> bytes:
    """A row's JSON text, decompressed at most to ``MAX_ROW_BYTES``."""
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(payload, MAX_ROW_BYTES)
    except zlib.error:
        raise JournalRowError("is not a compressed record") from None
    if inflater.unconsumed_tail:
        raise JournalRowError(f"decompresses past {MAX_ROW_BYTES >> 20} MiB")
    return text


def journaled(journal: RunJournal | None, key: str, compute: Callable[[], T], expect: Any = Any) -> T:
    """``compute()`` through ``journal`` when there is one (a stored result must be of type ``expect``)."""
    return compute() if journal is None else journal.cached(key, compute, expect)
