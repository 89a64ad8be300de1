"""The one VRAM budget every served workflow plans for, and the history it may set aside."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentsched.model.workflow import Workflow

log = logging.getLogger("agentsched.service")


def shared_budget(workflows: Sequence[Workflow], given_mb: float | None) -> tuple[float | None, list[Workflow]]:
    """The service's budget (``given_mb``, else the smallest any workflow declares: one GPU serves
    them all) and each workflow as its policy must plan for it (``Workflow.within_budget``: the
    machine's budget too, e.g. the VRAM a local Ray instance declares)."""
    budgets = [w.vram_budget_mb for w in workflows if w.vram_budget_mb is not None]
    budget = given_mb if given_mb is not None else min(budgets, default=None)
    return budget, [w.within_budget(budget) for w in workflows]


def warn_set_aside(store: Any, runtimes: Mapping[str, Any]) -> None:
    """Log, once per workflow, a learner starting afresh while the store holds the same workflow's
    history under another VRAM budget (the budget is part of a learner's key): served beside a
    workflow of a smaller budget, a trial saw a workflow's 40 learned invocations vanish without a
    word. Nothing is said when no history is set aside (a new store, a restart on the same set)."""
    for name, rt in runtimes.items():
        if rt.learner_id is None or store.sequence_length(rt.learner_id) > 0:
            continue
        rows = store.learners(name)
        mine = next((r for r in rows if r.id == rt.learner_id), None)
        if mine is None:
            continue
        doc = _without_budget(store.workflow_doc(mine.workflow_hash))
        for r in rows:
            same = (r.policy, r.card_hash, r.settings) == (mine.policy, mine.card_hash, mine.settings)
            if r.id == mine.id or not same or _without_budget(store.workflow_doc(r.workflow_hash)) != doc:
                continue
            n = store.sequence_length(r.id)
            if n:
                log.warning(
                    "workflow %s starts learning afresh under %s: the store holds %d invocations of it "
                    "learned under %s (learner %d), set aside (a learner's key holds its budget, here the "
                    "smallest a served workflow declares: serve the same workflows together to resume "
                    "them)",
                    name,
                    _mb(rt.workflow.vram_budget_mb),
                    n,
                    _mb((store.workflow_doc(r.workflow_hash) or {}).get("vram_budget_mb")),
                    r.id,
                )


def _without_budget(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (doc or {}).items() if k != "vram_budget_mb"}


def _mb(budget: float | None) -> str:
    return "no VRAM budget" if budget is None else f"a VRAM budget of {budget:g} MB"
