"""Looking after a store: which learners it holds, finding one by name (``agentsched store
list|forget|export|vacuum``; the export itself: ``store/export.py``).

A learner is named by its workflow's name (when that workflow has one learner), its key (16 hex
digits, as ``store list`` shows it; a unique prefix of 4 or more is enough) or ``#ID``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsched.errors import StoreError
from agentsched.store.rows import LearnerRow
from agentsched.store.store import Store

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
    return {
        "rounds": len(ok),
        "best_round": best.round if best else None,
        "best_mapping": best.mapping if best else None,
        "best_e2e_ms": best.e2e_ms if best else None,
    }


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
        out.append(
            {
                "learner": ln.id,
                "workflow": ln.workflow_name,
                "key": ln.key,
                "policy": ln.policy,
                "decision_space": space,
                "settings": ln.settings,
                "invocations": n,
                "last_s": last_s,
                "best_mapping": best["best_mapping"],
                "best_e2e_ms": best["best_e2e_ms"],
            }
        )
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
        raise UnknownLearnerError(
            f"store {st.path} has no learner {name!r} (workflows: {known}; see `agentsched store list`)"
        )
    return hits


def find_one(st: Store, name: str) -> LearnerRow:
    """The one learner ``name`` designates; several (a workflow learned under two settings) is an error
    listing their keys, so one command never drops more history than was named."""
    hits = find(st, name)
    if len(hits) > 1:
        keys = ", ".join(f"{ln.key} ({ln.policy})" for ln in hits)
        raise UnknownLearnerError(f"{name!r} names {len(hits)} learners in store {st.path}: give one key ({keys})")
    return hits[0]
