"""Records of the store as JSON (``store.py`` keeps them as text): an execution at full precision,
and the content a learner is keyed by (its workflow and the cards its policy sees)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.workflow import Mode, Workflow


def _json_safe(value: Any) -> Any:
    """``value`` when JSON can hold it (finite numbers, text, lists, dicts of them), else None."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


def execution_to_doc(x: Execution) -> dict[str, Any]:
    """An execution as JSON-able data at full precision (outputs are not kept: they are the
    caller's data, possibly large or not serialisable)."""
    return {
        "status": x.status.value,
        "mapping": {t: m.value for t, m in x.mapping.items()},
        "e2e_ms": x.e2e_ms,
        "elapsed_ms": x.elapsed_ms,
        "peak_vram_mb": x.peak_vram_mb,
        "spans": [
            [s.task, s.tool, s.mode.value, s.ready_ms, s.start_ms, s.end_ms, s.load_ms, s.vram_mb] for s in x.spans
        ],
        "vram_timeline": [list(p) for p in x.vram_timeline],
        "message": x.message,
        "testbed": x.testbed,
        "extra": {k: v for k, v in x.extra.items() if _json_safe(v) is not None},
    }


def execution_from_doc(doc: Mapping[str, Any]) -> Execution:
    """The inverse of ``execution_to_doc`` (``outputs`` empty)."""
    spans = tuple(
        TaskSpan(
            task=s[0], tool=s[1], mode=Mode(s[2]), ready_ms=s[3], start_ms=s[4], end_ms=s[5], load_ms=s[6], vram_mb=s[7]
        )
        for s in doc["spans"]
    )
    return Execution(
        status=Status(doc["status"]),
        mapping={t: Mode(m) for t, m in doc["mapping"].items()},
        e2e_ms=doc["e2e_ms"],
        elapsed_ms=doc["elapsed_ms"],
        peak_vram_mb=doc["peak_vram_mb"],
        spans=spans,
        vram_timeline=tuple(tuple(p) for p in doc["vram_timeline"]),
        message=doc["message"],
        testbed=doc["testbed"],
        extra=dict(doc["extra"]),
    )


def digest(doc: Any) -> str:
    """A short content hash of a JSON-able ``doc`` (what keys a workflow, a card set, a learner)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def workflow_doc(wf: Workflow) -> dict[str, Any]:
    """The workflow's content (DAG, decision space, budget), without where its cards come from."""
    return {
        "name": wf.name,
        "decision_space": wf.decision_space.value,
        "vram_budget_mb": wf.vram_budget_mb,
        "tasks": {t: {"tool": k.tool, "repeat": k.repeat} for t, k in wf.tasks.items()},
        "edges": [list(e) for e in wf.edges],
    }


def cards_doc(wf: Workflow) -> dict[str, Any]:
    """The cards a policy sees for ``wf`` (cold-start cards included) and which tasks have none."""
    return {
        "name": wf.card_set.name,
        "cards": {t: c.model_dump(mode="json", exclude_none=True) for t, c in wf.task_cards.items()},
        "unprofiled": sorted(wf.unprofiled),
    }
