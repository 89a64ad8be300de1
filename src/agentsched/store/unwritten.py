"""Records the store refused, kept on disk until it takes them: a file of JSON lines beside the store,
``<store>.unwritten.jsonl`` (or, when the store's folder cannot be written, one in the user's state
folder, ``$XDG_STATE_HOME/agentsched/unwritten/``), written by a runtime's write-behind
(``runtime/write_behind.py``) for the records still refused at close, those beyond its limit, and
those the store refused for good (a corrupt file). The next writable ``Store`` of that path writes
them (``Store.write_unwritten``) and removes the file. Why: otherwise those records would be lost,
and the store's history with them.

Each line is one record: ``{"op": "execution", "learner": KEY, "seq", "kind", "round",
"execution": DOC}`` or ``{"op": "round", "learner": KEY, "round", "mapping", "status", "e2e_ms",
"executions_after", "reason"}``. A learner is named by its key (not its row id: the file at the
store's path may have been replaced meanwhile). Lines a store cannot take (unknown learner,
malformed) go to ``<file>.rejected``, kept for the user, never silently dropped.

Many processes may share a store: writers and the reader take an exclusive ``flock`` on the file;
the reader first renames it aside (a writer that opened the old name before the rename sees, once
it holds the lock, that the name points elsewhere, and opens it again). A file renamed aside is
removed only once its records are in the store, and each is written once: the store marks the file
in the transaction that writes its records (table ``unwritten_taken``), so a process that dies
between that commit and the removal leaves a file the next one removes without writing it again.
A file whose records the store refused stays aside for the next try (this process's next write,
or any process once this one has ended).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentsched.errors import StoreError
from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode
from agentsched.store.records import execution_from_doc, execution_to_doc

try:  # POSIX; elsewhere one process per store is assumed
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("agentsched.store")
SUFFIX = ".unwritten.jsonl"
MARKS_TABLE = "CREATE TABLE IF NOT EXISTS unwritten_taken (file TEXT PRIMARY KEY)"

_TAKING: set[Path] = set()  # files this process is taking now (its other threads leave them alone)
_TAKING_LOCK = threading.Lock()


def unwritten_files(store_path: str | Path) -> tuple[Path, Path]:
    """Where a store's unwritten records are kept: beside it, else in the user's state folder."""
    p = Path(store_path).resolve()
    try:
        state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    except RuntimeError:  # no home folder to be found: beside the store only
        return Path(f"{p}{SUFFIX}"), Path(f"{p}{SUFFIX}")
    tag = hashlib.sha256(str(p).encode()).hexdigest()[:16]
    return Path(f"{p}{SUFFIX}"), state / "agentsched" / "unwritten" / f"{p.name}-{tag}{SUFFIX}"


@contextlib.contextmanager
def _locked(path: Path, mode: str) -> Iterator[IO[str]]:
    """``path`` opened and exclusively locked, still the file of that name once locked."""
    while True:
        f = open(path, mode, encoding="utf-8")
        try:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(f.fileno()), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                yield f
                return
        finally:
            f.close()


def waiting(store_path: str | Path) -> dict[str, int]:
    """The files of records kept for the store (those set aside for a next try included), and how
    many records each holds (``store list``)."""
    out = {}
    for path in unwritten_files(store_path):
        for f_path in [path, *_asides(path)]:
            try:
                with open(f_path, encoding="utf-8") as f:
                    out[str(f_path)] = sum(1 for line in f if line.strip())
            except OSError:
                continue
    return out


def keep(store_path: str | Path, docs: Sequence[dict[str, Any]]) -> Path | None:
    """Append ``docs`` to the store's unwritten file (beside it, else in the state folder); the file
    written, or None when neither could be (the records are then lost: the caller says so)."""
    text = "".join(json.dumps(d, allow_nan=False) + "\n" for d in docs)
    beside, fallback = unwritten_files(store_path)
    for path in (beside, fallback):
        try:
            if path is fallback:  # (the store's own folder is never created here)
                path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(path, "a") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            return path
        except (OSError, ValueError) as e:
            log.warning("cannot keep unwritten records in %s (%s)", path, e)
    return None


@dataclass(slots=True)
class Taken:
    """The records of the files taken (``taken``): per file renamed aside, its records in order."""

    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def docs(self) -> list[dict[str, Any]]:
        return [d for docs in self.files.values() for d in docs]


@contextlib.contextmanager
def taken(path: Path) -> Iterator[Taken]:
    """Every record in ``path`` (renamed aside first, so records kept meanwhile go to a new file) and
    in files left aside by a process that died while taking, or by this one when the store refused
    them; lines that are not records go to ``<path>.rejected``. The files are removed when the block
    ends without raising: the caller has written them (and marked them written: ``MARKS_TABLE``).
    Why not before: a process that dies meanwhile loses nothing."""
    asides = _orphans(path)
    aside = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.taking")
    try:
        os.replace(path, aside)
        asides.append(aside)
    except FileNotFoundError:
        pass
    with _TAKING_LOCK:
        asides = [a for a in asides if a not in _TAKING]
        _TAKING.update(asides)
    try:
        out, read = Taken(), []
        for a in asides:
            try:
                with _locked(a, "r") as f:
                    out.files[str(a)] = _records(path, f.read().splitlines())
                read.append(a)
            except FileNotFoundError:  # another process took it first
                continue
        yield out
        for a in read:
            a.unlink(missing_ok=True)
    finally:
        with _TAKING_LOCK:
            _TAKING.difference_update(asides)


def _records(path: Path, lines: list[str]) -> list[dict[str, Any]]:
    """The records among ``lines``; the others go to ``<path>.rejected``."""
    docs, bad = [], []
    for line in filter(str.strip, lines):
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        (docs if isinstance(doc, dict) and doc.get("op") in ("execution", "round") else bad).append(doc or line)
    if bad:
        reject(path, bad, "not a record")
    return docs


def _asides(path: Path) -> list[Path]:
    """Files renamed aside from ``path``, oldest first."""

    def age(p: Path) -> tuple[float, str]:
        try:
            return p.stat().st_mtime, p.name
        except OSError:
            return 0.0, p.name

    return sorted(path.parent.glob(f"{path.name}.*.taking"), key=age)


def _orphans(path: Path) -> list[Path]:
    """Files renamed aside that nobody is taking: by a process no longer running (it died before
    removing them), or by this one (the store refused them; ``taken`` skips those it takes now)."""
    out = []
    for aside in _asides(path):
        pid = aside.name[len(path.name) + 1 : -len(".taking")].split("-")[0]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            out.append(aside)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def reject(path: Path, docs: Sequence[Any], why: str) -> None:
    """Keep records a store cannot take in ``<path>.rejected`` (said once, with the reason)."""
    out = path.with_name(path.name + ".rejected")
    try:
        with open(out, "a", encoding="utf-8") as f:
            for d in docs:
                f.write((d if isinstance(d, str) else json.dumps(d)) + "\n")
    except OSError as e:
        log.error(
            "%d unwritten record(s) cannot go into the store (%s) nor be kept in %s (%s): lost", len(docs), why, out, e
        )
        return
    log.error("%d unwritten record(s) cannot go into the store (%s): kept in %s", len(docs), why, out)


def execution_record(
    learner_key: str, seq: int | None, kind: str, round_index: int | None, x: Execution
) -> dict[str, Any]:
    """The line kept for an execution (``Store.append``'s arguments)."""
    return {
        "op": "execution",
        "learner": learner_key,
        "seq": seq,
        "kind": kind,
        "round": round_index,
        "execution": execution_to_doc(x),
    }


def round_record(
    learner_key: str,
    round_index: int,
    mapping: Mapping[str, Mode],
    status: Status,
    e2e_ms: float | None,
    executions_after: int,
    reason: str,
) -> dict[str, Any]:
    """The line kept for an observed round (``Store.add_round``'s arguments)."""
    return {
        "op": "round",
        "learner": learner_key,
        "round": round_index,
        "mapping": {t: m.value for t, m in mapping.items()},
        "status": status.value,
        "e2e_ms": e2e_ms,
        "executions_after": executions_after,
        "reason": reason,
    }


class _Refused(Exception):
    """The store refused the records taken: they stay in their files aside, for the next try."""


class UnwrittenRecords:
    """Writing the records kept on disk, for ``Store`` (its ``path``, ``_write``, ``_insert_execution``,
    ``_insert_round``)."""

    def write_unwritten(self) -> int:
        """Write the records a runtime kept on disk while this store refused them, in one
        transaction per file, and remove the files; how many went in. Still refused (locked,
        read-only): they stay on disk for the next try, and it is said."""
        written = 0
        for path in unwritten_files(self.path):  # type: ignore[attr-defined]
            try:
                with taken(path) as records:
                    written += self._write_kept(path, records)
            except _Refused:
                continue
            except OSError as e:
                log.warning("cannot read the unwritten records in %s (%s); they stay there", path, e)
                continue
            self._unmark(list(records.files))
        return written

    def _write_kept(self, path: Path, records: Taken) -> int:
        """``records`` into the store in one transaction, each file marked written in it (or
        ``_Refused`` when the store refuses them)."""
        if not records.files:
            return 0
        try:
            with self._write() as c:  # type: ignore[attr-defined]
                written, again = self._insert_kept(c, path, records)
        except StoreError as e:
            log.warning("%d unwritten record(s) of %s wait on disk for the next try (%s)", len(records.docs), path, e)
            raise _Refused from None
        if written:
            log.warning(
                "store %s: %d record(s) kept in %s while it refused them are written now", self.path, written, path
            )  # type: ignore[attr-defined]
        if again:
            log.info(
                "store %s: %d file(s) of kept records were written before (a process ended before removing "
                "them): removed",
                self.path,
                again,
            )  # type: ignore[attr-defined]
        return written

    def _insert_kept(self, c: sqlite3.Connection, path: Path, records: Taken) -> tuple[int, int]:
        """(records written, files skipped: written before by a process that died before removing them)."""
        c.execute(MARKS_TABLE)
        ids = dict(c.execute("SELECT key, id FROM learners").fetchall())
        rejected: list[dict[str, Any]] = []
        written = skipped = 0
        for name, docs in records.files.items():
            # why: a process that died between its commit and the file's removal wrote these already
            if c.execute("SELECT 1 FROM unwritten_taken WHERE file = ?", (name,)).fetchone():
                skipped += 1
                continue
            for doc in docs:
                if self._insert_doc(c, ids.get(doc.get("learner")), doc):
                    written += 1
                else:
                    rejected.append(doc)
            c.execute("INSERT INTO unwritten_taken (file) VALUES (?)", (name,))
        if rejected:
            reject(
                path,
                rejected,
                "their learner is not in this store (forgotten, or another store at that path), or they are malformed",
            )
        return written, skipped

    def _insert_doc(self, c: sqlite3.Connection, learner_id: int | None, doc: dict[str, Any]) -> bool:
        """One kept record into the store; False when it cannot go in (unknown learner, malformed)."""
        try:
            if learner_id is None:
                return False
            if doc["op"] == "execution":
                x = execution_from_doc(doc["execution"])
                self._insert_execution(c, learner_id, doc["seq"], doc["kind"], doc["round"], x)  # type: ignore[attr-defined]
            else:
                self._insert_round(
                    c,
                    learner_id,
                    int(doc["round"]),
                    dict(doc["mapping"]),  # type: ignore[attr-defined]
                    str(doc["status"]),
                    doc["e2e_ms"],
                    int(doc["executions_after"]),
                    str(doc["reason"]),
                )
        except (KeyError, TypeError, ValueError, sqlite3.IntegrityError):
            return False
        return True

    def _unmark(self, names: list[str]) -> None:
        """Forget the marks of files now removed, and of any other removed meanwhile (a mark left by a
        process that died after the removal). Best effort: a mark left behind only costs a row."""
        if not names:
            return
        try:
            with self._write() as c:  # type: ignore[attr-defined]
                c.execute(MARKS_TABLE)
                marked = [r[0] for r in c.execute("SELECT file FROM unwritten_taken").fetchall()]
                gone = [(m,) for m in marked if m in names or not os.path.exists(m)]
                c.executemany("DELETE FROM unwritten_taken WHERE file = ?", gone)
        except StoreError as e:
            log.info("store %s: marks of the unwritten files taken stay (%s)", self.path, e)  # type: ignore[attr-defined]
