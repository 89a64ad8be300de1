"""Store writes that could not be done now, done later: a runtime keeps serving through a store
that is locked past its wait (another process holding it), read-only or full for a while.

The invocation is answered at once (without its id in the store); its record, and every later
one, wait in order. While records wait, a write does not wait for the store at all: it joins
them, and at most every ``RETRY_EVERY_S`` they are tried again, each try waiting at most
``RETRY_WAIT_S`` for a lock (not the store's whole busy timeout, which every invocation would wait). At
close they are tried once more with the store's full wait. What the store still refuses then, the
oldest records beyond ``limit``, and a record the store refuses for good (a corrupt file) are kept
on disk (``store/unwritten.py``: beside the store, else in the user's state folder), and the next
store opened at that path writes them; only a record that cannot be kept there either is lost,
and said. Why: a store refusing a write must neither stop the runtime nor lose the records.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from agentsched.errors import StoreError
from agentsched.store import unwritten

log = logging.getLogger("agentsched.runtime")
T = TypeVar("T")
PENDING_LIMIT = 100_000  # records kept waiting in memory, at most (each without its outputs); the oldest go to disk
RETRY_EVERY_S = 5.0  # waiting records are tried again at most this often
RETRY_WAIT_S = 0.1  # and each such try waits this long at most for another process's lock
Record = Callable[[], dict[str, Any]] | None  # a write as a line kept on disk, made only when it is kept


class WriteBehind:
    """A runtime's store writes, in order, done now or as soon as the store takes them again."""

    def __init__(self, store: Any, limit: int = PENDING_LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store  # a Store (its waiting_at_most shortens a retry's wait, its path keeps records), or None
        self.name = str(getattr(store, "path", store))
        self.limit = limit
        self.clock = clock
        # each write, with how to make the record it writes as a line of store/unwritten.py (None: none)
        self.pending: deque[tuple[Callable[[], object], Record]] = deque()
        self.kept = 0  # records kept on disk for the next store opened at this path
        self.lost = 0  # records dropped (refused, and neither written nor kept on disk)
        self._retry_at = 0.0
        self._lock = threading.RLock()

    def write(self, fn: Callable[[], T], record: Record = None) -> T | None:
        """``fn()`` (one store write) now, after the writes still waiting; None when it has to wait.
        ``record()``: the same write as a line ``store/unwritten.py`` keeps, should it not be done."""
        with self._lock:
            if self.pending and (self.clock() < self._retry_at or not self._flush(patient=False)):
                self._wait(fn, record)
                return None
            try:
                return fn()
            except StoreError as e:
                if not e.transient:
                    self._keep_on_disk([record], str(e))
                    return None
                log.warning(
                    "%s: a record waits for the store, which refused it (%s); the runtime goes on, and it "
                    "is written as soon as the store takes writes again",
                    self.name,
                    e,
                )
                self._retry_at = self.clock() + RETRY_EVERY_S
                self._wait(fn, record)
                return None

    def close(self) -> None:
        """A last try, with the store's full wait; what it still refuses is kept on disk."""
        with self._lock:
            if self.pending and not self._flush(patient=True):
                self._keep_on_disk([r for _, r in self.pending], "the store still refused them at close")
                self.pending.clear()

    def _flush(self, patient: bool) -> bool:
        """Write what waits, oldest first; False (the rest kept) at the first the store refuses."""
        quick = getattr(self.store, "waiting_at_most", None)
        written = 0
        with contextlib.nullcontext() if patient or quick is None else quick(RETRY_WAIT_S):
            while self.pending:
                fn, record = self.pending[0]
                try:
                    fn()
                    written += 1
                except StoreError as e:
                    if e.transient:
                        self._retry_at = self.clock() + RETRY_EVERY_S
                        return False
                    self._keep_on_disk([record], str(e))  # refused for good: it would block every later record
                self.pending.popleft()
            again = getattr(self.store, "write_unwritten", None)
            if written and self.kept and again is not None:  # the store takes writes again: those kept on disk too
                again()
        if written:
            log.warning("%s: the store takes writes again: %d waiting record(s) written", self.name, written)
        return True

    def _wait(self, fn: Callable[[], object], record: Record) -> None:
        self.pending.append((fn, record))
        if len(self.pending) > self.limit:
            self._keep_on_disk([self.pending.popleft()[1]], "more records waited than the limit")

    def _keep_on_disk(self, records: list[Record], why: str) -> None:
        """Keep ``records`` for the next store opened at this path; those that cannot be are lost, and said."""
        path = getattr(self.store, "path", None)
        keepable = [r() for r in records if r is not None]
        where = unwritten.keep(path, keepable) if keepable and path is not None else None
        if where is not None:
            self.kept += len(keepable)
            log.warning(
                "%s: %d record(s) not written (%s) are kept in %s; the next store opened at this path writes them",
                self.name,
                len(keepable),
                why,
                where,
            )
        lost = len(records) - (len(keepable) if where is not None else 0)
        if lost:
            self.lost += lost
            log.error("%s: %d record(s) could not be written and are lost (%s)", self.name, lost, why)
