"""Records the store refused, kept on disk until it takes them: a file of JSON lines beside the store,
``<store>.unwritten.jsonl`` (or, when the store's folder cannot be written, one in the user's state
folder, ``$XDG_STATE_HOME/agentsched/unwritten/``), written by a runtime's write-behind
(``runtime/write_behind.py``) for the records still refused at close, those beyond its limit, and
those the store refused for good (a corrupt file). The next writable ``Store`` of that path writes
them (``Store.write_unwritten``) and removes the file. Why: before, those records were lost, and
the store's history with them.

Each line is one record: ``{"op": "execution", "learner": KEY, "seq", "kind", "round",
"execution": DOC}`` or ``{"op": "round", "learner": KEY, "round", "mapping", "status", "e2e_ms",
"executions_after", "reason"}``. A learner is named by its key (not its row id: the file at the
store's path may have been replaced meanwhile). Lines a store cannot take (unknown learner,
malformed) go to ``<file>.rejected``, kept for the user, never silently dropped.

Many processes may share a store: writers and the reader take an exclusive ``flock`` on the file;
the reader first renames it aside (a writer that opened the old name before the rename sees, once
it holds the lock, that the name points elsewhere, and opens it again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
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
    """The files of records kept for the store, and how many records each holds (``store list``)."""
    out = {}
    for path in unwritten_files(store_path):
        try:
            with open(path, encoding="utf-8") as f:
                out[str(path)] = sum(1 for line in f if line.strip())
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


@contextlib.contextmanager
def taken(path: Path) -> Iterator[list[dict[str, Any]]]:
    """Every record in ``path`` (renamed aside first, so records kept meanwhile go to a new file) and
    in files a process that died while taking left aside; lines that are not records go to
    ``<path>.rejected``. The files are removed when the block ends without raising: the caller has
    written them, or kept them again. Why not before: a process that dies meanwhile loses nothing
    (at worst, dying between its commit and this removal, its records are written twice)."""
    asides = _orphans(path)
    aside = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.taking")
    try:
        os.replace(path, aside)
        asides.append(aside)
    except FileNotFoundError:
        pass
    lines, read = [], []
    for a in asides:
        try:
            with _locked(a, "r") as f:
                lines += f.read().splitlines()
            read.append(a)
        except FileNotFoundError:  # another process took it first
            continue
    docs, bad = [], []
    for line in filter(str.strip, lines):
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        (docs if isinstance(doc, dict) and doc.get("op") in ("execution", "round") else bad).append(doc or line)
    if bad:
        reject(path, bad, "not a record")
    yield docs
    for a in read:
        a.unlink(missing_ok=True)


def _orphans(path: Path) -> list[Path]:
    """Files renamed aside by a process no longer running (it died before writing them)."""
    out = []
    for aside in sorted(path.parent.glob(f"{path.name}.*.taking")):
        pid = aside.name[len(path.name) + 1:-len(".taking")].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
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
        log.error("%d unwritten record(s) cannot go into the store (%s) nor be kept in %s (%s): lost", len(docs),
                  why, out, e)
        return
    log.error("%d unwritten record(s) cannot go into the store (%s): kept in %s", len(docs), why, out)


def execution_record(learner_key: str, seq: int | None, kind: str, round_index: int | None,
                     x: Execution) -> dict[str, Any]:
    """The line kept for an execution (``Store.append``'s arguments)."""
    return {"op": "execution", "learner": learner_key, "seq": seq, "kind": kind, "round": round_index,
            "execution": execution_to_doc(x)}


def round_record(learner_key: str, round_index: int, mapping: Mapping[str, Mode], status: Status,
                 e2e_ms: float | None, executions_after: int, reason: str) -> dict[str, Any]:
    """The line kept for an observed round (``Store.add_round``'s arguments)."""
    return {"op": "round", "learner": learner_key, "round": round_index,
            "mapping": {t: m.value for t, m in mapping.items()}, "status": status.value, "e2e_ms": e2e_ms,
            "executions_after": executions_after, "reason": reason}


class UnwrittenRecords:
    """Writing the records kept on disk, for ``Store`` (its ``path``, ``_write``, ``_insert_execution``,
    ``_insert_round``)."""

    def write_unwritten(self) -> int:
        """Write the records a runtime kept on disk while this store refused them, in one
        transaction per file, and remove the files; how many went in. Still refused (locked,
        read-only): kept again for the next try, and said."""
        written = 0
        for path in unwritten_files(self.path):  # type: ignore[attr-defined]
            try:
                with taken(path) as docs:
                    written += self._write_kept(path, docs)
            except OSError as e:
                log.warning("cannot read the unwritten records in %s (%s); they stay there", path, e)
        return written

    def _write_kept(self, path: Path, docs: list[dict[str, Any]]) -> int:
        """``docs`` into the store in one transaction (or kept again when it refuses them)."""
        if not docs:
            return 0
        try:
            with self._write() as c:  # type: ignore[attr-defined]
                written = self._insert_kept(c, path, docs)
        except StoreError as e:
            again = keep(self.path, docs)  # type: ignore[attr-defined]
            if again is None:  # (the files taken stay aside, for the next store opened after this process)
                raise OSError(f"the store refused them ({e}) and they cannot be kept again") from None
            log.warning("%d unwritten record(s) of %s wait again in %s (%s)", len(docs), path, again, e)
            return 0
        log.warning("store %s: %d record(s) kept in %s while it refused them are written now",
                    self.path, len(docs), path)  # type: ignore[attr-defined]
        return written

    def _insert_kept(self, c: sqlite3.Connection, path: Path, docs: list[dict[str, Any]]) -> int:
        ids = dict(c.execute("SELECT key, id FROM learners").fetchall())
        rejected: list[dict[str, Any]] = []
        for doc in docs:
            learner_id = ids.get(doc.get("learner"))
            try:
                if learner_id is None:
                    raise ValueError("unknown learner")
                if doc["op"] == "execution":
                    x = execution_from_doc(doc["execution"])
                    self._insert_execution(c, learner_id, doc["seq"], doc["kind"], doc["round"], x)
                else:
                    self._insert_round(c, learner_id, int(doc["round"]), dict(doc["mapping"]), str(doc["status"]),
                                       doc["e2e_ms"], int(doc["executions_after"]), str(doc["reason"]))
            except (KeyError, TypeError, ValueError, sqlite3.IntegrityError):
                rejected.append(doc)
        if rejected:
            reject(path, rejected, "their learner is not in this store (forgotten, or another store at that path), "
                   "or they are malformed")
        return len(docs) - len(rejected)
