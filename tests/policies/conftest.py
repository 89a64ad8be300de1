"""Hand-made workflows for the baseline tests: cards in memory, no contention unless given, so each
decision can be worked out by hand (and does not move when the shipped cards are re-fitted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentsched.model import CardSet, Workflow


def build_workflow(cards: dict[str, dict[str, Any]], tasks: dict[str, str], edges: tuple = (),
                   space: str = "binary", budget: float | None = None, name: str = "hand") -> Workflow:
    """A workflow over an in-memory card set; contention parameters default to 0 (none)."""
    full = {}
    for tool, c in cards.items():
        c = dict(c)
        if c.get("gpu_ms") is not None:
            c.setdefault("contention_sensitivity", 0.0)
            c.setdefault("contention_pressure", 0.0)
            c.setdefault("vram_mb", 100.0)
            c.setdefault("load_ms", 0.0)
        full[tool] = c
    wf = Workflow(name=name, tasks=tasks, edges=[list(e) for e in edges], decision_space=space,
                  vram_budget_mb=budget)
    return wf.with_cards(CardSet(name=f"{name}-cards", cards=full))


@pytest.fixture
def make_workflow() -> Callable[..., Workflow]:
    return build_workflow


def context(wf: Workflow, seed: int = 0, rounds: int = 20, repeats: int = 5):
    """A PolicyContext for calling a policy directly (probes are not allowed here)."""
    import random

    from agentsched.policies.base import PolicyContext

    def no_probe(mapping):  # the classical baselines never probe
        raise AssertionError("unexpected probe")

    return PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(seed), probe=no_probe,
                         rounds=rounds, repeats=repeats)


@pytest.fixture
def make_context():
    return context
