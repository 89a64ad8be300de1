"""The service's one admission gate, and the invocations it let in (``Flight``).

At most ``max_concurrency`` invocations are accepted at a time and none while draining; each
accepted one runs in its own thread (``engine.Engine.start``), so this gate is the only bound on
them: no second limit on worker threads beside it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

from agentsched.runtime.runtime import InvokeResult


class Refusal(str, enum.Enum):
    """Why an invocation was not accepted (HTTP 503 either way)."""

    DRAINING = "draining"
    BUSY = "busy"


class Flight:
    """One invocation until it is answered: by its runtime, or by the cut at shutdown."""

    def __init__(self, name: str, *, admitted: bool = True) -> None:
        self.name = name
        self.admitted = admitted  # counted by the gate (an in-process call is not)
        self.started_s = time.monotonic()
        self.cut: InvokeResult | None = None  # set when the shutdown recorded it as cut
        self._notify: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._owner: str | None = None  # who records it: "result" (its own answer) or "cut", once
        self._answered = False

    def claim(self, owner: str) -> bool:
        """Take the right to record this invocation (``"result"``: its own answer; ``"cut"``: the
        shutdown's cut record); True for the first claim only: recorded once, never twice (two
        cuts at once, the drain's and a second signal's, included)."""
        with self._lock:
            if self._owner is not None:
                return False
            self._owner = owner
            return True

    def on_cut(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (from any thread) once the flight is cut; at once when it already is."""
        with self._lock:
            self._notify = notify
            done = self.cut is not None
        if done:
            notify()

    def mark_cut(self, result: InvokeResult) -> None:
        """The shutdown recorded this invocation as cut: ``result`` is its answer."""
        with self._lock:
            self.cut = result
            notify = self._notify
        if notify is not None:
            notify()

    def answer_once(self) -> bool:
        """True the first time only: its caller has been answered."""
        with self._lock:
            first, self._answered = not self._answered, True
            return first


class Admission:
    """The gate (see the module docstring) and the flights running now (the cut's to record)."""

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency
        self.cond = threading.Condition()
        self.in_flight = 0  # accepted, not yet answered
        self.draining = False
        self.running: set[Flight] = set()  # flights whose runtime has not returned yet

    def admit(self, name: str) -> Flight | Refusal:
        """An accepted flight of ``name``, or why not."""
        with self.cond:
            if self.draining:
                return Refusal.DRAINING
            if self.in_flight >= self.max_concurrency:
                return Refusal.BUSY
            self.in_flight += 1
            flight = Flight(name)
            self.running.add(flight)
            return flight

    def track(self, name: str) -> Flight:
        """A flight not counted by the gate (an in-process call), still cut at shutdown."""
        flight = Flight(name, admitted=False)
        with self.cond:
            self.running.add(flight)
        return flight

    def ended(self, flight: Flight) -> None:
        """Its runtime returned (or raised)."""
        with self.cond:
            self.running.discard(flight)
            self.cond.notify_all()

    def answered(self, flight: Flight) -> None:
        """Its caller has its answer: the slot frees (once)."""
        if not flight.admitted or not flight.answer_once():
            return
        with self.cond:
            self.in_flight -= 1
            self.cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Refuse new invocations, then wait up to ``timeout_s`` for the accepted ones; True when none is left."""
        with self.cond:
            self.draining = True
            return self.cond.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)
