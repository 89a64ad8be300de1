"""The store's ``contention`` table: what the traffic-aware decider learned per unit tool, kept across
restarts (``service/contention_memory.py`` reads and writes it).

One row per unit tool and card hash (the card it was learned with, on one machine): the learned
sensitivity ``s`` and pressure ``p`` (``planner/traffic_learn.ContentionLearner``), the GPU runs they
were learned from, and the measured ratio ``log_ratio`` (``MeasuredRatio``: the average log of
what its GPU runs took over what the planner predicted). A save replaces the rows of its keys.

Why a table any store can gain (no new schema version): it came after schema version 1. An older
store gets it on its first save, and a table from before ``log_ratio`` gains that column then
(read as 0 until); older agentsched ignores both.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CONTENTION_TABLE = """CREATE TABLE IF NOT EXISTS contention (
    unit TEXT NOT NULL, card_hash TEXT NOT NULL, s REAL NOT NULL, p REAL NOT NULL, runs INTEGER NOT NULL,
    updated_s REAL NOT NULL, log_ratio REAL NOT NULL DEFAULT 0, PRIMARY KEY (unit, card_hash))"""
_RATIO_COLUMN = "ALTER TABLE contention ADD COLUMN log_ratio REAL NOT NULL DEFAULT 0"


@dataclass(frozen=True)
class ContentionRow:
    """The contention learned for one unit tool, under one of its cards (values as stored: the
    reader checks them)."""

    unit: str
    card_hash: str  # the card it was learned with: a re-profiled (changed) machine starts afresh
    s: Any  # sensitivity
    p: Any  # pressure
    runs: Any  # GPU runs it was learned from
    updated_s: float
    log_ratio: Any = 0.0  # measured over predicted GPU runs, log (0: none measured)


class ContentionTable:
    """The ``contention`` table's reads and writes, for ``Store`` (its ``_read``, ``_write``, ``_fail``)."""

    def contention(self, card_hashes: Iterable[str]) -> list[ContentionRow]:
        """The learned contention stored under any of ``card_hashes`` (none in a store without it)."""
        hashes = sorted(set(card_hashes))
        if not hashes or not self._read(  # type: ignore[attr-defined]
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'contention'"
        ):
            return []
        ratio = "log_ratio" if self._has_ratio() else "0.0"
        rows = self._read(
            f"SELECT unit, card_hash, s, p, runs, updated_s, {ratio} FROM contention "  # type: ignore[attr-defined]
            f"WHERE card_hash IN ({', '.join('?' * len(hashes))}) ORDER BY unit, card_hash",
            tuple(hashes),
        )
        return [ContentionRow(*r) for r in rows]

    def save_contention(self, rows: Iterable[tuple[str, str, float, float, int, float]]) -> None:
        """Keep (unit, card_hash, s, p, runs, log_ratio) rows, replacing what each key held (one
        transaction)."""
        now = time.time()
        rows = list(rows)
        try:
            with self._write() as c:  # type: ignore[attr-defined]
                c.execute(CONTENTION_TABLE)
                if not _columns(c) >= {"log_ratio"}:
                    c.execute(_RATIO_COLUMN)
                c.executemany(
                    "INSERT OR REPLACE INTO contention (unit, card_hash, s, p, runs, log_ratio, updated_s) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(*r, now) for r in rows],
                )
        except sqlite3.IntegrityError as e:  # a contention table not as this schema writes it (damaged)
            raise self._fail(f"is damaged: its contention table refused a row ({e})") from None  # type: ignore[attr-defined]

    def _has_ratio(self) -> bool:
        return any(r[1] == "log_ratio" for r in self._read("PRAGMA table_info(contention)"))  # type: ignore[attr-defined]


def _columns(c: sqlite3.Connection) -> set[str]:
    return {r[1] for r in c.execute("PRAGMA table_info(contention)")}
