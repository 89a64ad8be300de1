"""A workflow of tools given in memory (``workflow_from_tools``): what a ``Runtime`` runs when the
tools are Python classes or instances rather than names in a workflow file."""

from __future__ import annotations

from typing import Any

from agentsched.errors import AgentschedError, WorkflowError, validation_line
from agentsched.model.workflow import Workflow


def workflow_from_tools(
    name: str,
    tools: dict[str, Any],
    edges: Any = (),
    *,
    decision_space: str = "three_way",
    vram_budget_mb: float | None = None,
    cards: Any = None,
) -> Workflow:
    """A workflow of tools given in memory: ``tools`` maps each task id to a ``Tool`` class or
    instance, ``edges`` is a list of (from, to) task ids. ``cards``: a ``CardSet``, a card-set name
    or file, or a dict tool path/task id -> ``ToolCard``; tasks without a card run in cold start."""
    from agentsched.model.cards import CardSet, ToolCard
    from agentsched.model.tool import register_tool

    if not isinstance(tools, dict) or not tools:
        raise WorkflowError(f"workflow {name!r}: tools must be a non-empty dict task id -> Tool class or instance")
    paths = {str(t): register_tool(obj, f"{name}.{t}") for t, obj in tools.items()}
    try:
        wf = Workflow(
            name=name,
            tasks={t: {"tool": p} for t, p in paths.items()},
            edges=[list(e) for e in edges],
            decision_space=decision_space,
            vram_budget_mb=vram_budget_mb,
        )
    except AgentschedError:
        raise
    except Exception as exc:  # pydantic's validation error: one line
        errors = exc.errors() if hasattr(exc, "errors") else [{"msg": str(exc), "loc": ()}]
        raise WorkflowError(f"workflow {name!r}: {validation_line(errors, 'workflow', more=False)}") from None
    if cards is None:
        card_set = CardSet(name="none", source="no profile: cold start", cards={})
    elif isinstance(cards, CardSet):
        card_set = cards
    elif isinstance(cards, dict):
        by_path = {}
        for key, card in cards.items():
            if not isinstance(card, ToolCard):
                raise WorkflowError(
                    f"workflow {name!r}: cards[{key!r}] is not a ToolCard (give the path of a card "
                    "file from agentsched profile, a CardSet, or a dict of ToolCards)"
                )
            by_path[paths.get(key, key)] = card.model_copy(update={"name": paths.get(key, key)})
        card_set = CardSet(name=f"{name}-cards", source="given in memory", cards=by_path)
    else:
        return wf.with_cards(str(cards))
    return wf.with_cards(card_set)
