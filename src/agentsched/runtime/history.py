"""A runtime's learner in the store: its sequence of executions and rounds, written and replayed.

Every execution the loop is served is appended at its place in the learner's sequence (through a
``WriteBehind``: a store refusing writes for now gets them later); a new runtime on the same store
and settings reads that sequence back to replay it, and the stored rounds' mappings stand in for a
policy that does not reproduce its choices. Where the sequence and the policy disagree (another
process recorded a different mapping at a place, or the policy asks for another one), the replay
stops there: later executions are kept outside the sequence.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from agentsched.errors import StoreError
from agentsched.loop.runner import RoundRecord
from agentsched.model.execution import Execution
from agentsched.model.mapping import mapping_key
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies.base import Proposal
from agentsched.runtime.write_behind import WriteBehind
from agentsched.store import unwritten
from agentsched.store.store import Store

log = logging.getLogger("agentsched.runtime")


class LearnerHistory:
    """One learner's history in ``store``: what is appended, what is replayed, where replay stopped."""

    def __init__(self, store: Store, workflow: Workflow, policy_label: str, settings: dict[str, Any]) -> None:
        self.store = store
        self.workflow = workflow
        self.policy_label = policy_label
        self.writes = WriteBehind(store)  # store writes the store refused for now, done later
        row = store.learner(workflow, policy_label, settings)
        self.learner_id: int = row.id
        self.learner_key: str = row.key  # the learner's key in the store (how records kept on disk name it)
        self.diverged_at: int | None = None  # place where a replay disagreed with the policy
        self._stored_rounds: dict[int, Any] | None = None  # the store's rounds of this learner (read once)

    def add_round(self, rec: RoundRecord) -> None:
        """Record a round the loop observed (its mapping, outcome and the policy's reason)."""
        store, learner, r, why = self.store, self.learner_id, rec.result, str(rec.proposal_info.get("reason", ""))
        self.writes.write(
            lambda: store.add_round(learner, r.round, r.mapping, r.status, r.e2e_ms, rec.executions_after, why),
            lambda: unwritten.round_record(
                self.learner_key, r.round, r.mapping, r.status, r.e2e_ms, rec.executions_after, why
            ),
        )

    def append(
        self, seq: int, kind: str, x: Execution, mapping: dict[str, Mode], round_index: int | None
    ) -> tuple[int | None, Execution]:
        """Record execution ``seq`` (its place fixed now: in the sequence unless replay diverged);
        its id (None while the store refuses it) and what the policy learns: another process's record
        of this place when it was first there with the same mapping."""
        store, learner, place = self.store, self.learner_id, None if self.diverged_at is not None else seq
        now = {"now": True}
        slim = dataclasses.replace(x, outputs={})  # (the store keeps no outputs; a waiting record holds none)

        def write() -> tuple[int, bool]:
            got = store.append(learner, place, kind, round_index, slim)
            if not got[1] and not now["now"]:  # taken while it waited: the policy learned ours already
                self.diverge(seq, "another process recorded this place while its record waited for the store")
            return got

        got = self.writes.write(
            write, lambda: unwritten.execution_record(self.learner_key, place, kind, round_index, slim)
        )
        now["now"] = False
        if got is None or got[1]:
            return (None if got is None else got[0]), x
        try:  # another process recorded this place first
            theirs = store.execution_at(learner, seq)
        except StoreError:
            theirs = None
        if theirs is not None and mapping_key(self.workflow, theirs.mapping) == mapping_key(self.workflow, mapping):
            return got[0], theirs
        self.diverge(seq, "another process recorded a different mapping at this place")
        return got[0], x

    def record(self, x: Execution, kind: str) -> int | None:
        """Keep an execution run outside the learner's rounds, outside its sequence; its id (None
        while the store refuses it: written later)."""
        store, learner = self.store, self.learner_id
        slim = dataclasses.replace(x, outputs={})  # (the store keeps no outputs; a waiting record holds none)
        got = self.writes.write(
            lambda: store.append(learner, None, kind, None, slim),
            lambda: unwritten.execution_record(self.learner_key, None, kind, None, slim),
        )
        return None if got is None else got[0]

    def stored(self, seq: int, mapping: dict[str, Mode]) -> Execution | None:
        """The stored execution at place ``seq`` while the replay lasts and agrees with ``mapping``."""
        if self.diverged_at is not None:
            return None
        x = self.store.execution_at(self.learner_id, seq)
        if x is None:
            return None
        if mapping_key(self.workflow, x.mapping) != mapping_key(self.workflow, mapping):
            self.diverge(seq, "the policy asked for a different mapping than the stored one")
            return None
        return x

    def recorded_round(self, round_index: int) -> Proposal | None:
        """The stored proposal of ``round_index`` while the replay lasts (an LLM is not asked again
        for a round it already answered: its answer is in the store); None once live."""
        if self.diverged_at is not None:
            return None
        if self._stored_rounds is None:
            self._stored_rounds = {r.round: r for r in self.store.rounds(self.learner_id)}
        row = self._stored_rounds.get(round_index)
        if row is None:
            return None
        mapping = {t: Mode(m) for t, m in row.mapping.items()}
        return Proposal(mapping, {"reason": f"replayed from the store: {row.reason}", "replayed": True})

    def diverge(self, seq: int, why: str) -> None:
        self.diverged_at = seq
        log.warning(
            "replay stopped at execution %d (%s): the policy continues live from what it learned "
            "before; later executions are kept in the history outside the replayed sequence",
            seq,
            why,
        )

    def unreplayable(self, e: BaseException, replayed: int) -> StoreError:
        """The one-line error of a stored history this runtime cannot replay, and how to drop it."""
        name, path, learner = self.workflow.name, self.store.path, self.learner_id
        return StoreError(
            f"learner {learner} ({name}, {self.policy_label}) in store {path} "
            f"cannot replay its history (after {replayed} stored invocations: {type(e).__name__}: {e}); "
            f"forget it to start afresh: agentsched history {name} --store {path} "
            f"--forget {learner} (or Store(path).forget({learner}))"
        )
