"""Store writes that could not be done now, done later: a runtime keeps serving through a store
that is locked past its wait (another process holding it), read-only or full for a while.

The invocation is answered at once (without its id in the store); its record, and every later
one, wait in order and are tried again before each later write and at close. Nothing is lost
unless the store still refuses at close, or more than ``limit`` records wait (the oldest go
first), and each loss is logged. Before, one failed write stopped the runtime for good.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from agentsched.errors import StoreError

log = logging.getLogger("agentsched.runtime")
T = TypeVar("T")
PENDING_LIMIT = 10_000  # records kept waiting for the store, at most


class WriteBehind:
    """A runtime's store writes, in order, done now or as soon as the store takes them again."""

    def __init__(self, store_path: str, limit: int = PENDING_LIMIT) -> None:
        self.store_path = store_path
        self.limit = limit
        self.pending: deque[Callable[[], object]] = deque()
        self.lost = 0  # records dropped (over the limit, or refused at close)
        self._lock = threading.RLock()

    def write(self, fn: Callable[[], T]) -> T | None:
        """``fn()`` (one store write) now, after the writes still waiting; None when it has to wait."""
        with self._lock:
            if self.flush():
                try:
                    return fn()
                except StoreError as e:
                    log.warning("%s: a record waits for the store, which refused it (%s); the runtime goes on, "
                                "and it is written as soon as the store takes writes again", self.store_path, e)
            self.pending.append(fn)
            if len(self.pending) > self.limit:
                self.pending.popleft()
                self._lose(1, "more records waited than the limit")
            return None

    def flush(self) -> bool:
        """Write what waits, oldest first; False (the rest kept) at the first the store refuses."""
        with self._lock:
            written = 0
            while self.pending:
                try:
                    self.pending[0]()
                except StoreError:
                    return False
                self.pending.popleft()
                written += 1
            if written:
                log.warning("%s: the store takes writes again: %d waiting record(s) written", self.store_path, written)
            return True

    def close(self) -> None:
        """A last try; what the store still refuses is lost, and said."""
        with self._lock:
            if not self.flush():
                self._lose(len(self.pending), "the store still refused them at close")
                self.pending.clear()

    def _lose(self, n: int, why: str) -> None:
        self.lost += n
        log.error("%s: %d record(s) could not be written and are lost (%s)", self.store_path, n, why)
