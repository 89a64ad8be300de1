"""Looking after a store: which learners it holds, forgetting one, exporting one, compacting the file
(``agentsched store list|forget|export|vacuum``).

A learner is named by its workflow's name (when that workflow has one learner), its key (16 hex
digits, as ``store list`` shows it; a unique prefix of 4 or more is enough) or ``#ID``. An export is
one JSON document (``EXPORT_FORMAT``, docs/runtime.md): the learner's key and settings, the workflow
and cards it learned, its rounds and every execution's full record. A store holds no secret (the
settings are round size, exploration share, seed and testbed; no API key or URL is ever stored), so
an export holds none either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentsched.errors import StoreError
from agentsched.store import decode
from agentsched.store.store import SCHEMA_VERSION, LearnerRow, Store

EXPORT_FORMAT = "agentsched-learner-export"
EXPORT_VERSION = 1
MIN_KEY_PREFIX = 4


class UnknownLearnerError(StoreError):
    """No learner, or more than one, answers to the name given."""


def file_bytes(path: str | Path) -> int:
    """The store's size on disk: its file and its write-ahead log (``-wal``)."""
    path = Path(path)
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.is_file())


def best_round(st: Store, learner_id: int) -> dict[str, Any]:
    """A learner's best observed round (lowest median E2E among its ok rounds), and how many were ok."""
    ok = [r for r in st.rounds(learner_id) if r.status == "ok" and r.e2e_ms is not None]
    best = min(ok, key=lambda r: r.e2e_ms) if ok else None
    return {"rounds": len(ok), "best_round": best.round if best else None,
            "best_mapping": best.mapping if best else None, "best_e2e_ms": best.e2e_ms if best else None}


def _counts(st: Store) -> dict[int, tuple[int, float]]:
    """Per learner id: how many executions it holds and when the newest was recorded (epoch s)."""
    rows = st._read("SELECT learner_id, COUNT(*), MAX(created_s) FROM executions GROUP BY learner_id")
    return {int(r[0]): (int(r[1]), float(r[2])) for r in rows}


def summaries(st: Store) -> list[dict[str, Any]]:
    """One line of ``store list`` per learner, oldest first."""
    counts = _counts(st)
    out = []
    for ln in st.learners():
        n, last_s = counts.get(ln.id, (0, None))
        best = best_round(st, ln.id)
        space = (st.workflow_doc(ln.workflow_hash) or {}).get("decision_space", "three_way")
        out.append({"learner": ln.id, "workflow": ln.workflow_name, "key": ln.key, "policy": ln.policy,
                    "decision_space": space,
                    "settings": ln.settings, "invocations": n, "last_s": last_s,
                    "best_mapping": best["best_mapping"], "best_e2e_ms": best["best_e2e_ms"]})
    return out


def find(st: Store, name: str) -> list[LearnerRow]:
    """The learners ``name`` designates (see the module docstring); a one-line error when none does."""
    every = st.learners()
    text = name.strip()
    if text.startswith("#") and text[1:].isdigit():
        hits = [ln for ln in every if ln.id == int(text[1:])]
    else:
        hits = [ln for ln in every if ln.workflow_name == text]
        if not hits and len(text) >= MIN_KEY_PREFIX:
            hits = [ln for ln in every if ln.key.startswith(text.lower())]
    if not hits:
        known = ", ".join(sorted({ln.workflow_name for ln in every})) or "none"
        raise UnknownLearnerError(f"store {st.path} has no learner {name!r} (workflows: {known}; "
                                  "see `agentsched store list`)")
    return hits


def find_one(st: Store, name: str) -> LearnerRow:
    """The one learner ``name`` designates; several (a workflow learned under two settings) is an error
    listing their keys, so one command never drops more history than was named."""
    hits = find(st, name)
    if len(hits) > 1:
        keys = ", ".join(f"{ln.key} ({ln.policy})" for ln in hits)
        raise UnknownLearnerError(f"{name!r} names {len(hits)} learners in store {st.path}: give one key "
                                  f"({keys})")
    return hits[0]


def export_doc(st: Store, ln: LearnerRow) -> dict[str, Any]:
    """Everything the store holds of one learner, as JSON data (``EXPORT_FORMAT``)."""
    rows = st._read("SELECT id, seq, kind, round, status, e2e_ms, message, record, created_s FROM executions "
                    "WHERE learner_id = ? ORDER BY id", (ln.id,))
    executions = [{"invocation_id": r[0], "seq": r[1], "kind": r[2], "round": r[3], "status": r[4],
                   "e2e_ms": r[5], "message": r[6], "created_s": r[8],
                   "record": _decoded(st, r[7], f"execution {r[0]}")} for r in rows]
    rounds = [{"round": r.round, "mapping": r.mapping, "status": r.status, "e2e_ms": r.e2e_ms,
               "executions_after": r.executions_after, "reason": r.reason, "created_s": r.created_s}
              for r in st.rounds(ln.id)]
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "schema_version": SCHEMA_VERSION,
            "learner": {"id": ln.id, "key": ln.key, "workflow_name": ln.workflow_name,
                        "workflow_hash": ln.workflow_hash, "card_hash": ln.card_hash, "policy": ln.policy,
                        "settings": ln.settings, "created_s": ln.created_s},
            "workflow": st.workflow_doc(ln.workflow_hash), "cards": st.card_doc(ln.card_hash),
            "best": best_round(st, ln.id), "rounds": rounds, "executions": executions}


def _decoded(st: Store, text: Any, what: str) -> dict[str, Any]:
    try:
        return decode.loads_object(text, what)
    except decode.RowError as e:
        raise StoreError(f"store {st.path} is damaged: {e}") from None


def write_export(doc: dict[str, Any], out: str | Path) -> None:
    """Write the export whole or not at all (a temporary file renamed over ``out``)."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def looks_like_export(path: Path) -> bool:
    """Does ``path`` begin as ``write_export`` begins an export (its format first), whatever its
    version? Only its first bytes are read (an export may be large); an unreadable file is a
    one-line ``StoreError``."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as e:
        raise StoreError(f"{path} cannot be read: {e.strerror}") from None
    return json.dumps({"format": EXPORT_FORMAT}, indent=1)[:-2].encode() in head


def read_export(path: str | Path) -> dict[str, Any]:
    """An export read back (checked to be one); a one-line ``StoreError`` otherwise."""
    path = Path(path)  # (a text path, as docs/runtime.md writes it, was an AttributeError)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StoreError(f"export {path} cannot be read: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise StoreError(f"{path} is not an agentsched learner export (format {EXPORT_FORMAT!r})")
    if doc.get("version") != EXPORT_VERSION:
        raise StoreError(f"export {path} has version {doc.get('version')!r}; this agentsched reads {EXPORT_VERSION}")
    return doc
