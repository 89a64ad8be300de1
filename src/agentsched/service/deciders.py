"""The one seam between the service and the deciders it can place live with: ``make_decider``.

Live placement asks a per-ready-task decider, chosen by name (``ServiceConfig.decider``), for
every task of every invocation in flight. The service builds it from the one registry of deciders
(``loop/registry.py``), here and nowhere else. Only deciders that learn contention online are
offered: the service keeps what they learn across restarts (``contention_memory.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsched.loop.registry import DECIDER_ALIASES, decider_by_name

# the registry's deciders the service accepts (an alias of one too); the first is the default
DECIDER_NAMES = ("traffic-aware", "traffic-aware-noadm")


def make_decider(
    name: str,
    *,
    learned: Mapping[str, tuple[float, float, int]] | None = None,
    ratios: Mapping[str, float] | None = None,
) -> Any:
    """The decider called ``name``, starting from contention ``learned`` before and measured ``ratios``
    (a restarted service resumes them, ``contention_memory.py``). ``ValueError`` for an unknown name."""
    if DECIDER_ALIASES.get(name, name) not in DECIDER_NAMES:
        raise ValueError(f"unknown decider {name!r} (valid: {', '.join(DECIDER_NAMES)})")
    return decider_by_name(name, learned=learned, ratios=ratios)
