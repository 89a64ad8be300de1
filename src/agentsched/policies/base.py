"""The policy interface: propose a mapping for the next round, observe the round's result.

A policy sees the workflow (DAG, decision space, budget), the tool cards, its own history and an
injected random generator. It never sees the oracle. Extra executions (monitor probes) go through
``PolicyContext.probe`` so the runner counts them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsched.model.cards import ToolCard
from agentsched.model.execution import Execution
from agentsched.model.mapping import MappingT
from agentsched.model.rounds import RoundResult
from agentsched.model.workflow import Workflow

__all__ = ["MappingT", "Policy", "PolicyContext", "Proposal", "RoundResult"]


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know before round 0."""

    workflow: Workflow  # DAG, decision space, VRAM budget
    cards: dict[str, ToolCard]  # task id -> profile card (cold-start policies use names/tags only)
    rng: random.Random  # the only source of randomness a policy may use
    probe: Callable[[MappingT], Execution]  # one extra testbed execution, counted by the runner
    rounds: int | None  # rounds the runner will ask for; None: endless (a runtime), no last round
    repeats: int  # executions per round (the round's E2E is their median)
    # whether one more probe may run now (None: always; the runtime's exploration budget says no
    # when probes would exceed their share of live invocations)
    probe_allowed: Callable[[], bool] | None = None


@dataclass
class Proposal:
    """A mapping and, optionally, what the policy wants recorded with it (evidence, prompts)."""

    mapping: MappingT  # task id -> mode, complete and inside the decision space
    info: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable audit data


class Policy(ABC):
    """Base class of every placement policy (one module per policy under ``policies/``)."""

    #: registry name, e.g. "heft"
    name: str = "policy"
    #: False for offline references (the oracle), which are labelled so in reports
    online: bool = True
    #: True when the same executions always give the same proposals, so a runtime replaying its
    #: stored history gets the same mappings back; False (an LLM's answers) makes the runtime replay
    #: the stored rounds' mappings instead of asking the policy again
    reproducible: bool = True

    def reset(self, ctx: PolicyContext) -> None:
        """Start a new run. Subclasses call super().reset(ctx) and clear their state."""
        self.ctx = ctx

    @abstractmethod
    def propose(self, round_index: int) -> Proposal:
        """The mapping for round ``round_index`` (and what to record with it)."""

    def observe(self, result: RoundResult) -> dict[str, Any] | None:
        """Learn from the round. May probe through ``ctx.probe``; may return evidence to record."""
        return None

    def check_workflow(self, workflow: Workflow) -> None:
        """Raise a one-line ``PolicyError`` when ``workflow`` is beyond what this policy takes on (more
        mappings or tasks than it holds: ucb1's arm cap, agent-plan's task cap). Read from the workflow's
        shape alone, with no I/O, so a bench can skip this policy on that workflow and run it on the
        others. No-op by default."""

    def preflight(self, workflow: Workflow) -> None:
        """Check, before any run on ``workflow``, that the policy can work: ``check_workflow``, then what
        a subclass adds (e.g. that an LLM endpoint answers); raise a one-line ``AgentschedError``
        otherwise."""
        self.check_workflow(workflow)

    def close(self) -> None:
        """Release what the policy holds across runs (a client, a local model server). No-op by default;
        harnesses call it once they are done with the policy."""

    def describe(self) -> dict[str, Any]:
        """Settings to record with a run (JSON-serialisable, never a secret)."""
        return {"name": self.name, "label": self.label}

    @property
    def label(self) -> str:
        """Name shown in reports."""
        return self.name
