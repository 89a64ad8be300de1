"""The persistent store of the runtime (SQLite, WAL): cards, executions, rounds, learners."""

from agentsched.store.store import (
    SCHEMA_VERSION,
    ExecutionRow,
    LearnerRow,
    RoundRow,
    Store,
    execution_from_doc,
    execution_to_doc,
)

__all__ = [
    "SCHEMA_VERSION",
    "ExecutionRow",
    "LearnerRow",
    "RoundRow",
    "Store",
    "execution_from_doc",
    "execution_to_doc",
]
