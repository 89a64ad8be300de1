"""runtime/write_behind.py: writes a store refuses for a while wait, in order; one it refuses for
good is lost and said, never blocking the records after it."""

from __future__ import annotations

from agentsched.errors import StoreError
from agentsched.runtime.write_behind import RETRY_EVERY_S, WriteBehind


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
    wb.pending.append(store.write("x", bad=True))  # (a record the store cannot take, waiting behind it)
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
