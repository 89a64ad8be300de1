"""The store's learned contention: kept per unit tool and card, replaced on save, and a store from
before the table gains it without a new schema version."""

from __future__ import annotations

import sqlite3

import pytest

from agentsched.errors import StoreError
from agentsched.store import Store


def test_contention_rows_round_trip_and_a_save_replaces_its_keys(tmp_path):
    store = Store(tmp_path / "s.db")
    try:
        assert store.contention(["c1"]) == []
        store.save_contention([("ocr", "c1", 2.5, 0.75, 40, 0.4), ("clip", "c2", 0.5, 2.9, 12, 0.0)])
        store.save_contention([("ocr", "c1", 3.0, 0.5, 90, -0.2)])
        rows = store.contention(["c1", "c2", "other"])
        assert [(r.unit, r.card_hash, r.s, r.p, r.runs, r.log_ratio) for r in rows] == [
            ("clip", "c2", 0.5, 2.9, 12, 0.0),
            ("ocr", "c1", 3.0, 0.5, 90, -0.2),
        ]
        assert [r.unit for r in store.contention(["c2"])] == ["clip"] and store.contention([]) == []
    finally:
        store.close()


def test_a_store_from_before_the_table_reads_none_and_gains_it_on_save(tmp_path):
    path = tmp_path / "old.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:  # as version 1 stores were written before learned contention
        conn.execute("DROP TABLE contention")
    store = Store(path)
    try:
        assert store.contention(["c1"]) == []
        store.save_contention([("ocr", "c1", 2.0, 1.0, 3, 0.1)])
        assert [r.runs for r in store.contention(["c1"])] == [3]
    finally:
        store.close()
    ro = Store(path, read_only=True)
    try:
        assert [r.s for r in ro.contention(["c1"])] == [2.0]
        with pytest.raises(StoreError, match="read-only"):
            ro.save_contention([("ocr", "c1", 1.0, 1.0, 1, 0.0)])
    finally:
        ro.close()


def test_a_contention_table_from_before_the_measured_ratio_reads_it_as_zero_and_gains_it_on_save(tmp_path):
    path = tmp_path / "older.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:  # as the table was first written, without log_ratio
        conn.execute("DROP TABLE contention")
        conn.execute(
            "CREATE TABLE contention (unit TEXT NOT NULL, card_hash TEXT NOT NULL, s REAL NOT NULL, "
            "p REAL NOT NULL, runs INTEGER NOT NULL, updated_s REAL NOT NULL, PRIMARY KEY (unit, card_hash))"
        )
        conn.execute("INSERT INTO contention VALUES ('ocr', 'c1', 2.0, 1.0, 7, 0)")
    store = Store(path)
    try:
        assert [(r.runs, r.log_ratio) for r in store.contention(["c1"])] == [(7, 0.0)]
        store.save_contention([("clip", "c2", 0.3, 2.0, 4, 0.25)])
        rows = store.contention(["c1", "c2"])
        assert [(r.unit, r.runs, r.log_ratio) for r in rows] == [("clip", 4, 0.25), ("ocr", 7, 0.0)]
    finally:
        store.close()
