"""runtime/write_behind.py: writes a store refuses for a while wait, in order; one it refuses for
good never blocks the records after it; what is never written is kept on disk beside the store
(store/unwritten.py), or, when it cannot be, lost and said."""

from __future__ import annotations

import json
from pathlib import Path

from agentsched.errors import StoreError
from agentsched.runtime.write_behind import RETRY_EVERY_S, WriteBehind
from agentsched.store.unwritten import unwritten_files


def _refusal(transient: bool) -> StoreError:
    e = StoreError("store s.db is locked by another process" if transient else "store s.db failed: bad record")
    e.transient = transient
    return e


class Flaky:
    """A store stand-in: ``down`` refuses every write (transient), ``bad`` writes refused for good."""

    def __init__(self) -> None:
        self.down, self.written = False, []

    def write(self, item: str, bad: bool = False):
        def fn():
            if bad:
                raise _refusal(False)
            if self.down:
                raise _refusal(True)
            self.written.append(item)
            return item

        return fn


def test_refused_writes_wait_in_order_and_go_first_once_the_store_takes_writes(caplog):
    store, clock = Flaky(), [0.0]
    wb = WriteBehind(None, clock=lambda: clock[0])
    assert wb.write(store.write("a")) == "a"
    store.down = True
    assert wb.write(store.write("b")) is None and wb.write(store.write("c")) is None
    store.down = False
    assert wb.write(store.write("d")) is None  # no retry before its time: it joins them
    clock[0] += RETRY_EVERY_S
    assert wb.write(store.write("e")) == "e" and store.written == ["a", "b", "c", "d", "e"]
    assert "the store takes writes again: 3 waiting record(s) written" in caplog.text


def test_a_write_refused_for_good_is_lost_and_said_and_blocks_nothing(caplog):
    store, clock = Flaky(), [0.0]
    wb = WriteBehind(None, clock=lambda: clock[0])
    store.down = True
    assert wb.write(store.write("a")) is None
    wb.pending.append((store.write("x", bad=True), None))  # (a record the store cannot take, waiting behind it)
    store.down = False
    clock[0] += RETRY_EVERY_S
    assert wb.write(store.write("b")) == "b" and store.written == ["a", "b"] and wb.lost == 1
    assert wb.write(store.write("y", bad=True)) is None and wb.lost == 2 and not wb.pending
    assert sum("could not be written and are lost" in r.message for r in caplog.records) == 2


def test_what_the_store_still_refuses_at_close_is_lost_and_said(caplog):
    store = Flaky()
    wb = WriteBehind(None)
    store.down = True
    wb.write(store.write("a"))
    wb.close()
    assert wb.lost == 1 and not wb.pending and "1 record(s) could not be written" in caplog.text


def test_over_the_limit_the_oldest_waiting_record_goes():
    store = Flaky()
    wb = WriteBehind(None, limit=2)
    store.down = True
    for item in "abc":
        wb.write(store.write(item))
    store.down = False
    wb.close()
    assert store.written == ["b", "c"] and wb.lost == 1


class AtPath:
    """What the write-behind reads of a store: where it is (its records are kept beside it)."""

    def __init__(self, path: Path) -> None:
        self.path = path


def _record(item: str):
    return lambda: {"op": "round", "item": item}


def _kept(db: Path) -> list[str]:
    beside = unwritten_files(db)[0]
    return [json.loads(line)["item"] for line in beside.read_text().splitlines()] if beside.exists() else []


def test_what_the_store_still_refuses_at_close_is_kept_beside_it(tmp_path, caplog):
    store, db = Flaky(), tmp_path / "s.db"
    wb = WriteBehind(AtPath(db))
    store.down = True
    for item in "ab":
        wb.write(store.write(item), _record(item))
    wb.close()
    assert _kept(db) == ["a", "b"] and wb.kept == 2 and wb.lost == 0 and not wb.pending
    assert "2 record(s) not written (the store still refused them at close) are kept in" in caplog.text


def test_a_write_refused_for_good_is_kept_beside_the_store(tmp_path):
    store, db = Flaky(), tmp_path / "s.db"
    wb = WriteBehind(AtPath(db))
    assert wb.write(store.write("x", bad=True), _record("x")) is None
    assert _kept(db) == ["x"] and wb.kept == 1 and wb.lost == 0


def test_over_the_limit_the_oldest_waiting_record_goes_to_disk(tmp_path):
    store, db = Flaky(), tmp_path / "s.db"
    wb = WriteBehind(AtPath(db), limit=2)
    store.down = True
    for item in "abc":
        wb.write(store.write(item), _record(item))
    assert _kept(db) == ["a"] and [r() for _, r in wb.pending] == [_record("b")(), _record("c")()]
    store.down = False
    wb.close()  # (a store without write_unwritten: what it kept waits for the next store opened there)
    assert store.written == ["b", "c"] and _kept(db) == ["a"]


def test_a_record_that_cannot_be_kept_anywhere_is_lost_and_said(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder would be")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    store = Flaky()
    wb = WriteBehind(AtPath(tmp_path / "gone" / "s.db"))  # (its folder does not exist: nothing beside it)
    store.down = True
    wb.write(store.write("a"), _record("a"))
    wb.close()
    assert wb.lost == 1 and wb.kept == 0 and "1 record(s) could not be written and are lost" in caplog.text


def test_once_the_store_takes_writes_again_it_also_writes_what_was_kept_on_disk(tmp_path):
    class Reopened(AtPath):
        taken = 0

        def write_unwritten(self) -> int:
            self.taken += 1
            return 1

    store, target = Flaky(), Reopened(tmp_path / "s.db")
    wb = WriteBehind(target, limit=1, clock=lambda: 0.0)
    store.down = True
    for item in "ab":
        wb.write(store.write(item), _record(item))
    assert wb.kept == 1 and target.taken == 0
    store.down = False
    wb.close()
    assert store.written == ["b"] and target.taken == 1
