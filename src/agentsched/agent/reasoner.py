"""The reasoner protocol: what decides a round's mapping from the four evidence streams.

A ``Reasoner`` reads one ``AgentView`` per round and returns a ``Decision`` (mapping, one-line
reason, audit record). The rules reasoner (``agent/rules.py``) always decides; the LLM reasoner
(``agent/llm/``) raises ``NoDecision`` when its endpoint gives nothing usable for the round.
``FallbackReasoner`` wraps such a reasoner: for that round it asks a second reasoner (the rules)
on the same view, so an LLM outage degrades the agent to agent-rules quality, never below, and the
audit trail says that it fell back and why. The shape follows vLLM's scheduler interface: a small
documented ABC with a typed output record.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from agentsched.agent.view import AgentView, MappingT
from agentsched.errors import AgentschedError
from agentsched.model.mapping import format_mapping

log = logging.getLogger("agentsched.agent")


@dataclass(frozen=True)
class Decision:
    """A reasoner's answer for one round."""

    mapping: MappingT  # complete mapping inside the decision space
    reason: str  # one line saying why (the rule that decided, the model's reason, the fallback)
    audit: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable record: prompt, responses, ...


class NoDecision(AgentschedError):
    """A reasoner has no usable answer for this round (endpoint down, answer invalid, circuit open).

    ``why`` is one line; ``audit`` records what was tried (prompt, every response); ``quiet``: an
    expected outcome (e.g. the circuit is already open), logged at info level rather than warning."""

    def __init__(self, why: str, audit: dict[str, Any] | None = None, *, quiet: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.audit = dict(audit or {})
        self.quiet = quiet


class Reasoner(ABC):
    """Decides each round's mapping from the view. One instance serves one policy, run after run."""

    #: short name: "rules", "llm"
    name: str = "reasoner"

    @property
    def label(self) -> str:
        """Name in policy labels (``agent-<label>``): "rules", "llm:MODEL"."""
        return self.name

    def reset(self) -> None:
        """A new run starts: forget per-run state (hints followed, the circuit breaker's count)."""

    @abstractmethod
    def propose(self, view: AgentView) -> Decision:
        """The mapping for ``view.round`` from ``view`` alone (never the oracle or the simulated world).
        Raises ``NoDecision`` when this reasoner cannot decide the round."""

    def preflight(self) -> None:
        """Check, before any run, that the reasoner can work (one cheap request to an LLM endpoint);
        raise a one-line ``AgentschedError`` otherwise. No-op by default."""

    def close(self) -> None:
        """Release what the reasoner holds (a local model server, a client). No-op by default."""

    def describe(self) -> dict[str, Any]:
        """Settings to record with a run (JSON-serialisable, never a secret)."""
        return {"name": self.name}


class FallbackReasoner(Reasoner):
    """``primary`` when it decides; otherwise ``fallback`` on the same view for that round."""

    def __init__(self, primary: Reasoner, fallback: Reasoner) -> None:
        self.primary = primary  # e.g. the LLM reasoner
        self.fallback = fallback  # must always decide, e.g. the rules reasoner
        self.name = primary.name

    @property
    def label(self) -> str:
        return self.primary.label

    def reset(self) -> None:
        self.primary.reset()
        self.fallback.reset()

    def propose(self, view: AgentView) -> Decision:
        """The primary's decision, or the fallback's with the primary's audit and why it fell back."""
        try:
            return self.primary.propose(view)
        except NoDecision as e:
            d = self.fallback.propose(view)
            note = f"{e.why}; falling back to the {self.fallback.name} reasoner on the same evidence ({d.reason})"
            audit = {**e.audit, "fallback": note, "fallback_reasoner": self.fallback.name}
            trail = audit.get("response")
            if isinstance(trail, list):  # the per-request trail ends with the fallback's record
                audit["response"] = [*trail, {"fallback": note, "mapping": format_mapping(view.workflow, d.mapping)}]
            (log.info if e.quiet else log.warning)("agent-%s round %d: %s", self.primary.name, view.round, note)
            return Decision(dict(d.mapping), note, audit)

    def preflight(self) -> None:
        self.primary.preflight()
        self.fallback.preflight()

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.fallback.close()

    def describe(self) -> dict[str, Any]:
        return {**self.primary.describe(), "fallback": self.fallback.describe()}
