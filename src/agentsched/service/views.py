"""Read-only views of an engine's workflows (protocol models; no HTTP here)."""

from __future__ import annotations

from typing import Any

from agentsched.model.workflow import Mode
from agentsched.service.bounded import bounded_text
from agentsched.service.config import Placement
from agentsched.service.engine import Engine
from agentsched.service.protocol import Health, HistoryRow, MappingView, WorkflowView


def describe(engine: Engine, name: str) -> WorkflowView:
    rt = engine.runtime(name)
    best = rt.best
    live = rt.pinned is None and engine.config.placement is Placement.LIVE  # no mapping: each task placed when ready
    return WorkflowView(
        name=name,
        policy=rt.policy.label,
        tasks=list(rt.workflow.task_ids),
        pinned=rt.pinned is not None,
        current_mapping=None if live else _modes(rt.pinned or rt.current),
        best_mapping=_modes(best[1]) if best else None,
        best_e2e_ms=best[0] if best else None,
        invocations=max(rt.executions, engine.stored_runs[name]) + engine.outside_runs[name],
        replayed=rt.replayed,
        placement="pinned" if rt.pinned is not None else engine.config.placement.value,
        # no CUDA here: every GPU placement (a pinned gpu_now too) runs as host code on the CPU
        host_only=rt.host_only,
        learner=rt.learner_id,
    )


def mapping_view(engine: Engine, name: str) -> MappingView:
    d = describe(engine, name)
    return MappingView(
        name=d.name,
        pinned=d.pinned,
        current_mapping=d.current_mapping,
        best_mapping=d.best_mapping,
        best_e2e_ms=d.best_e2e_ms,
    )


def history(engine: Engine, name: str, limit: int) -> list[HistoryRow]:
    """The newest ``limit`` invocations of ``name``'s learner, each message bounded as an answer's is."""
    rt = engine.runtime(name)
    # the newest ``limit`` read with SQL LIMIT: a long-lived learner holds millions of rows
    rows = engine.store.executions(rt.learner_id, limit=limit) if rt.learner_id is not None else []
    cap = engine.config.max_message_chars
    return [
        HistoryRow(
            invocation_id=r.id,
            seq=r.seq,
            kind=r.kind,
            round=r.round,
            mapping=r.mapping,
            status=str(getattr(r.status, "value", r.status)),
            e2e_ms=_finite(r.e2e_ms),
            message=bounded_text(r.message, cap)[0],
        )
        for r in rows
    ]


def health(engine: Engine | None) -> Health:
    if engine is None:  # (not started, or closed)
        return Health(status="starting", workflows=0, in_flight=0, time_scale=1.0)
    return Health(
        status="draining" if engine.draining else "ok",
        workflows=len(engine.runtimes),
        in_flight=engine.in_flight,
        time_scale=engine.config.time_scale,
    )


def _finite(x: float | None) -> float | None:
    return x if x is None or x == x and abs(x) != float("inf") else None


def _modes(mapping: dict[str, Any] | None) -> dict[str, Mode] | None:
    return None if mapping is None else {t: Mode(getattr(m, "value", m)) for t, m in mapping.items()}
