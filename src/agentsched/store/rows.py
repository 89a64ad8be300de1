"""The store's rows as its readers receive them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsched.model.execution import Execution
from agentsched.store import decode
from agentsched.store.records import execution_from_doc


@dataclass(frozen=True)
class LearnerRow:
    """One learner: a workflow under a card set, learned by one policy with one set of settings."""

    id: int
    key: str
    workflow_name: str
    workflow_hash: str
    card_hash: str
    policy: str
    settings: dict[str, Any]
    created_s: float


@dataclass(frozen=True)
class ExecutionRow:
    """One stored execution (an invocation of a runtime)."""

    id: int  # the invocation id
    learner_id: int
    seq: int | None  # place in the learner's sequence; None: recorded by another process first
    kind: str  # "round" or "probe"
    round: int | None
    mapping: dict[str, str]
    status: str
    e2e_ms: float | None
    message: str
    created_s: float

    def execution(self, record: str) -> Execution:
        return decode.execution(record, f"execution {self.id}", execution_from_doc)


@dataclass(frozen=True)
class RoundRow:
    """One observed round of a learner."""

    learner_id: int
    round: int
    mapping: dict[str, str]
    status: str
    e2e_ms: float | None
    executions_after: int
    reason: str
    created_s: float
