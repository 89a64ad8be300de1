"""The one seam between the service and the deciders it can place live with: ``make_decider``.

Live placement asks a per-ready-task decider, chosen by name (``ServiceConfig.decider``), for
every task of every invocation in flight. The service builds it here and nowhere else, so pointing
the service at another registry of deciders is this one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsched.planner.load import LoadPlanner

# names the service accepts, each the load-aware decider (with admission); the first is the default
DECIDER_NAMES = ("load-aware", "agentsched")


def make_decider(
    name: str,
    *,
    learned: Mapping[str, tuple[float, float, int]] | None = None,
    ratios: Mapping[str, float] | None = None,
) -> Any:
    """The decider called ``name``, starting from contention ``learned`` before and measured ``ratios``
    (a restarted service resumes them, ``contention_memory.py``). ``ValueError`` for an unknown name."""
    if name not in DECIDER_NAMES:
        raise ValueError(f"unknown decider {name!r} (valid: {', '.join(DECIDER_NAMES)})")
    return LoadPlanner(learned=learned, ratios=ratios)
