"""The one VRAM budget every served workflow plans for, and what it changes for each."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agentsched.model.workflow import Workflow

log = logging.getLogger("agentsched.service")


def shared_budget(workflows: Sequence[Workflow], given_mb: float | None) -> tuple[float | None, list[Workflow]]:
    """The service's budget (``given_mb``, else the smallest any workflow declares: one GPU serves
    them all) and each workflow as its policy must plan for it (``Workflow.within_budget``). A
    workflow whose mappings the budget narrows is another workflow to its learner (the budget is
    part of its key): it is said so, once, in the log, since its history under its own budget is
    then left aside (a trial saw a workflow's 40 learned invocations vanish when a smaller one joined)."""
    budgets = [w.vram_budget_mb for w in workflows if w.vram_budget_mb is not None]
    budget = given_mb if given_mb is not None else min(budgets, default=None)
    shared = [w.within_budget(budget) for w in workflows]
    for own, wf in zip(workflows, shared, strict=True):
        if wf is not own:
            mine = "without a budget" if own.vram_budget_mb is None else f"under its own {own.vram_budget_mb:g} MB"
            log.warning("workflow %s plans for the shared VRAM budget of %g MB (%s): it learns apart from its "
                        "history %s, which the store keeps", own.name, budget,
                        "--vram-budget-mb" if given_mb is not None else "the smallest a served workflow declares",
                        mine)
    return budget, shared
