"""The persistent store: one SQLite file (standard library ``sqlite3``, WAL mode) that keeps what a
runtime learned, so a new process resumes where the last one stopped.

Its responsibilities, one module each: the file's connection (opening, lock waits, bounded reads,
transactions, errors as one line: ``store/database.py``), its schema (``store/schema.py``), the rows
it answers (``store/rows.py``), and here the tables' reads and writes: learners, executions, rounds
(the contention table: ``store/contention.py``; records kept aside while it refused them:
``store/unwritten.py``).

Nothing is ever updated, and only ``forget`` deletes (a whole learner, in one transaction), so a
failure costs at most the write that failed. Records a runtime kept on disk while the store refused
them are written when a store is next opened for writing (``write_unwritten``).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.store import decode
from agentsched.store.contention import ContentionTable
from agentsched.store.database import DEFAULT_BUSY_TIMEOUT_S, DEFAULT_QUERY_LIMIT_S, EMPTY, Database
from agentsched.store.records import cards_doc, digest, execution_from_doc, execution_to_doc, workflow_doc
from agentsched.store.rows import ExecutionRow, LearnerRow, RoundRow
from agentsched.store.schema import SCHEMA_VERSION
from agentsched.store.unwritten import UnwrittenRecords

UNWRITTEN_WAIT_S = 1.0  # opening a store waits this long at most to write records kept while it refused them
T = TypeVar("T")

__all__ = [
    "EMPTY",
    "SCHEMA_VERSION",
    "ExecutionRow",
    "LearnerRow",
    "RoundRow",
    "Store",
    "execution_from_doc",
    "execution_to_doc",
]


class Store(Database, ContentionTable, UnwrittenRecords):
    """One SQLite store file and its tables. Thread-safe (one connection, serialised); many processes may share it."""

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        on_wait: Callable[[str], None] | None = None,
        wait_notice_s: float | None = None,
        query_limit_s: float = DEFAULT_QUERY_LIMIT_S,
    ) -> None:
        super().__init__(
            path,
            read_only=read_only,
            busy_timeout_s=busy_timeout_s,
            on_wait=on_wait,
            wait_notice_s=wait_notice_s,
            query_limit_s=query_limit_s,
        )
        if not read_only:  # records kept on disk while it refused them, written first (a short wait)
            with self.waiting_at_most(UNWRITTEN_WAIT_S):
                self.write_unwritten()

    # ---- learners --------------------------------------------------------------------------
    def learner(self, wf: Workflow, policy: str, settings: Mapping[str, Any]) -> LearnerRow:
        """The learner of ``wf`` (its content and cards) under ``policy`` and ``settings``,
        created on first use. Records the workflow and its cards."""
        wdoc, cdoc = workflow_doc(wf), cards_doc(wf)
        whash, chash = digest(wdoc), digest(cdoc)
        settings = dict(settings)
        key = digest({"workflow": whash, "cards": chash, "policy": policy, "settings": settings})
        with self._write() as c:
            c.execute(
                "INSERT OR IGNORE INTO workflows (hash, name, doc) VALUES (?, ?, ?)", (whash, wf.name, json.dumps(wdoc))
            )
            c.execute(
                "INSERT OR IGNORE INTO card_sets (hash, name, doc) VALUES (?, ?, ?)",
                (chash, cdoc["name"], json.dumps(cdoc)),
            )
            c.execute(
                "INSERT OR IGNORE INTO learners (key, workflow_hash, workflow_name, card_hash, policy, "
                "settings, created_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, whash, wf.name, chash, policy, json.dumps(settings, sort_keys=True), time.time()),
            )
        rows = self._read(
            "SELECT id, key, workflow_name, workflow_hash, card_hash, policy, settings, created_s "
            "FROM learners WHERE key = ?",
            (key,),
        )
        return self._learner(rows[0])

    def learners(self, workflow: str | None = None) -> list[LearnerRow]:
        """Every learner, or those of one workflow (by name or content hash), oldest first."""
        sql = "SELECT id, key, workflow_name, workflow_hash, card_hash, policy, settings, created_s FROM learners"
        args: tuple = ()
        if workflow is not None:
            sql += " WHERE workflow_name = ? OR workflow_hash = ?"
            args = (workflow, workflow)
        return [self._learner(r) for r in self._read(sql + " ORDER BY id", args)]

    def forget(self, learner_id: int) -> int:
        """Delete a learner with its executions and rounds (the next runtime with its key starts
        afresh); returns how many executions went. Its workflow and card records stay (shared)."""
        with self._write() as c:
            gone = c.execute("DELETE FROM executions WHERE learner_id = ?", (learner_id,)).rowcount
            c.execute("DELETE FROM rounds WHERE learner_id = ?", (learner_id,))
            if c.execute("DELETE FROM learners WHERE id = ?", (learner_id,)).rowcount == 0:
                raise self._fail(f"has no learner {learner_id}")
        return int(gone)

    def workflow_doc(self, whash: str) -> dict[str, Any] | None:
        rows = self._read("SELECT doc FROM workflows WHERE hash = ?", (whash,))
        return self._decoded(decode.loads_object, rows[0][0], f"workflow {whash}") if rows else None

    def card_doc(self, chash: str) -> dict[str, Any] | None:
        rows = self._read("SELECT doc FROM card_sets WHERE hash = ?", (chash,))
        return self._decoded(decode.loads_object, rows[0][0], f"card set {chash}") if rows else None

    # ---- executions ------------------------------------------------------------------------
    def execution_at(self, learner_id: int, seq: int) -> Execution | None:
        """The execution recorded at place ``seq`` of a learner's sequence, if any."""
        rows = self._read("SELECT record FROM executions WHERE learner_id = ? AND seq = ?", (learner_id, seq))
        return (
            self._decoded(decode.execution, rows[0][0], f"execution {seq} of learner {learner_id}", execution_from_doc)
            if rows
            else None
        )

    def append(
        self, learner_id: int, seq: int | None, kind: str, round_index: int | None, x: Execution
    ) -> tuple[int, bool]:
        """Record ``x`` at place ``seq`` (None: outside the sequence). Returns (its id, whether it
        took place ``seq``): when another process recorded place ``seq`` first, ``x`` is still
        kept, outside the sequence."""
        with self._write() as c:
            return self._insert_execution(c, learner_id, seq, kind, round_index, x)

    def _insert_execution(
        self, c: sqlite3.Connection, learner_id: int, seq: int | None, kind: str, round_index: int | None, x: Execution
    ) -> tuple[int, bool]:
        doc = execution_to_doc(x)
        row = (
            learner_id,
            kind,
            round_index,
            json.dumps(doc["mapping"]),
            x.status.value,
            x.e2e_ms if x.e2e_ms is not None and math.isfinite(x.e2e_ms) else None,
            x.message,
            json.dumps(doc),
            os.getpid(),
            time.time(),
        )
        sql = (
            "INSERT INTO executions (learner_id, seq, kind, round, mapping, status, e2e_ms, message, record, "
            "pid, created_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        if seq is not None:
            try:  # (a failed INSERT undoes only itself: the transaction goes on)
                return int(c.execute(sql, (row[0], seq, *row[1:])).lastrowid), True
            except sqlite3.IntegrityError:
                pass  # place taken by another process: keep ours outside the sequence
        return int(c.execute(sql, (row[0], None, *row[1:])).lastrowid), False

    def executions(self, learner_id: int, limit: int | None = None) -> list[ExecutionRow]:
        """Every execution of a learner (or its newest ``limit``, read with SQL LIMIT), oldest first."""
        cols = "id, learner_id, seq, kind, round, mapping, status, e2e_ms, message, created_s"
        sql, args = f"SELECT {cols} FROM executions WHERE learner_id = ? ORDER BY id", (learner_id,)
        if limit is not None:
            sql, args = f"SELECT * FROM ({sql} DESC LIMIT ?) ORDER BY id", (learner_id, limit)
        rows = self._read(sql, args)
        return [
            ExecutionRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                self._decoded(decode.mapping, r[5], f"execution {r[0]}"),
                self._decoded(decode.status, r[6], f"execution {r[0]}"),
                self._decoded(decode.e2e, r[7], f"execution {r[0]}"),
                r[8],
                r[9],
            )
            for r in rows
        ]

    def sequence_length(self, learner_id: int, *, outside: bool = False) -> int:
        """Executions in the learner's sequence (``outside``: those kept outside it: pinned, live, cut)."""
        rows = self._read(
            f"SELECT COUNT(*) FROM executions WHERE learner_id = ? AND seq IS {'' if outside else 'NOT '}NULL",
            (learner_id,),
        )
        return int(rows[0][0])

    # ---- rounds ----------------------------------------------------------------------------
    def add_round(
        self,
        learner_id: int,
        round_index: int,
        mapping: Mapping[str, Mode],
        status: Status,
        e2e_ms: float | None,
        executions_after: int,
        reason: str,
    ) -> None:
        """Record an observed round (a round already recorded, e.g. by a replay, is kept as is)."""
        with self._write() as c:
            self._insert_round(
                c,
                learner_id,
                round_index,
                {t: m.value for t, m in mapping.items()},
                status.value,
                e2e_ms,
                executions_after,
                reason,
            )

    @staticmethod
    def _insert_round(
        c: sqlite3.Connection,
        learner_id: int,
        round_index: int,
        mapping: Mapping[str, str],
        status: str,
        e2e_ms: float | None,
        executions_after: int,
        reason: str,
    ) -> None:
        c.execute(
            "INSERT OR IGNORE INTO rounds (learner_id, round, mapping, status, e2e_ms, executions_after, "
            "reason, created_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (learner_id, round_index, json.dumps(dict(mapping)), status, e2e_ms, executions_after, reason, time.time()),
        )

    def rounds(self, learner_id: int) -> list[RoundRow]:
        rows = self._read(
            "SELECT learner_id, round, mapping, status, e2e_ms, executions_after, reason, created_s "
            "FROM rounds WHERE learner_id = ? ORDER BY round",
            (learner_id,),
        )
        return [
            RoundRow(
                r[0],
                r[1],
                self._decoded(decode.mapping, r[2], f"round {r[1]} of learner {r[0]}"),
                self._decoded(decode.status, r[3], f"round {r[1]} of learner {r[0]}"),
                self._decoded(decode.e2e, r[4], f"round {r[1]} of learner {r[0]}"),
                r[5],
                r[6],
                r[7],
            )
            for r in rows
        ]

    def _learner(self, r: tuple) -> LearnerRow:
        return LearnerRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            self._decoded(decode.loads_object, r[6], f"learner {r[0]}'s settings"),
            r[7],
        )

    def _decoded(self, how: Callable[..., T], value: Any, what: str, *args: Any) -> T:
        """``how(value, what, *args)``; a row it cannot read is this store's one-line error."""
        try:
            return how(value, what, *args)
        except decode.RowError as e:
            raise self._fail(f"is damaged: {e}") from None
