"""Store writes that could not be done now, done later: a runtime keeps serving through a store
that is locked past its wait (another process holding it), read-only or full for a while.

The invocation is answered at once (without its id in the store); its record, and every later
one, wait in order. While records wait, a write does not wait for the store at all: it joins
them, and at most every ``RETRY_EVERY_S`` they are tried again, each try waiting at most
``RETRY_WAIT_S`` for a lock (before, every invocation waited the store's whole busy timeout). At
close they are tried once more with the store's full wait. A write the store refuses for good (a
record it cannot take, a corrupt file) is not kept: it is lost, and said; so are records still
refused at close, and the oldest beyond ``limit``. Before, one refused write stopped the runtime.
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

log = logging.getLogger("agentsched.runtime")
T = TypeVar("T")
PENDING_LIMIT = 100_000  # records kept waiting for the store, at most (each without its outputs)
RETRY_EVERY_S = 5.0  # waiting records are tried again at most this often
RETRY_WAIT_S = 0.1  # and each such try waits this long at most for another process's lock


class WriteBehind:
    """A runtime's store writes, in order, done now or as soon as the store takes them again."""

    def __init__(self, store: Any, limit: int = PENDING_LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store  # a Store (its waiting_at_most shortens a retry's wait), or None
        self.name = str(getattr(store, "path", store))
        self.limit = limit
        self.clock = clock
        self.pending: deque[Callable[[], object]] = deque()
        self.lost = 0  # records dropped (refused for good, over the limit, or refused at close)
        self._retry_at = 0.0
        self._lock = threading.RLock()

    def write(self, fn: Callable[[], T]) -> T | None:
        """``fn()`` (one store write) now, after the writes still waiting; None when it has to wait."""
        with self._lock:
            if self.pending and (self.clock() < self._retry_at or not self._flush(patient=False)):
                self._keep(fn)
                return None
            try:
                return fn()
            except StoreError as e:
                if not e.transient:
                    self._lose(1, str(e))
                    return None
                log.warning("%s: a record waits for the store, which refused it (%s); the runtime goes on, and it "
                            "is written as soon as the store takes writes again", self.name, e)
                self._retry_at = self.clock() + RETRY_EVERY_S
                self._keep(fn)
                return None

    def close(self) -> None:
        """A last try, with the store's full wait; what it still refuses is lost, and said."""
        with self._lock:
            if self.pending and not self._flush(patient=True):
                self._lose(len(self.pending), "the store still refused them at close")
                self.pending.clear()

    def _flush(self, patient: bool) -> bool:
        """Write what waits, oldest first; False (the rest kept) at the first the store refuses."""
        quick = getattr(self.store, "waiting_at_most", None)
        written = 0
        with contextlib.nullcontext() if patient or quick is None else quick(RETRY_WAIT_S):
            while self.pending:
                try:
                    self.pending[0]()
                    written += 1
                except StoreError as e:
                    if e.transient:
                        self._retry_at = self.clock() + RETRY_EVERY_S
                        return False
                    self._lose(1, str(e))  # refused for good: it would block every later record
                self.pending.popleft()
        if written:
            log.warning("%s: the store takes writes again: %d waiting record(s) written", self.name, written)
        return True

    def _keep(self, fn: Callable[[], object]) -> None:
        self.pending.append(fn)
        if len(self.pending) > self.limit:
            self.pending.popleft()
            self._lose(1, "more records waited than the limit")

    def _lose(self, n: int, why: str) -> None:
        self.lost += n
        log.error("%s: %d record(s) could not be written and are lost (%s)", self.name, n, why)
