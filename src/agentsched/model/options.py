"""Named choices shared by the agent, the planner, the harnesses and the CLI (written once here)."""

from __future__ import annotations

import enum


class StartKind(str, enum.Enum):
    """What a scheduler knows before round 0."""

    WARM = "warm"  # the profile cards
    COLD = "cold"  # tool names, tags and workload lines only

    def __str__(self) -> str:
        return self.value


class InitialRule(str, enum.Enum):
    """The rules reasoner's round-0 choice."""

    RULES = "rules"  # the written rules
    ALL_GPU = "all-gpu"  # no prior: every task on gpu_now (what the monitor alone recovers; ablations)

    def __str__(self) -> str:
        return self.value


STARTS: tuple[str, ...] = tuple(s.value for s in StartKind)  # ("warm", "cold")
INITIALS: tuple[str, ...] = tuple(r.value for r in InitialRule)  # ("rules", "all-gpu")
