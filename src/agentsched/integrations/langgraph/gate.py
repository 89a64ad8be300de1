"""The start rules of ``model/rules.py`` when LangGraph, not agentsched, decides when a node
is called: a node blocks in ``enter`` until its placement may start, and ``leave`` releases it.

The rules are the ``rules.Dispatcher``'s, driven ``by_arrival``: a node is ready when LangGraph
calls it (ready order: order of arrival), and the Dispatcher says when it starts:

* ``cpu``: at most ``cpu_slots`` placeable nodes at once (None: no cap);
* ``gpu_now``: starts at once and holds its VRAM until it leaves; if that exceeds the VRAM budget
  the node is infeasible (``Infeasible``, reported as ``oom``), as in the paper;
* ``gpu_queue``: a FIFO queue that runs one node at a time; the head is admitted when the queue is
  idle and its VRAM fits beside what is held; a head larger than the whole budget is infeasible.

Host-only tools placed on a GPU mode arrive here as ``cpu`` (the caller resolves that with
``effective_mapping``). Thread-safe: LangGraph calls nodes of one step from a thread pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from agentsched.model import rules
from agentsched.model.workflow import Mode


class Infeasible(Exception):
    """A start that cannot happen: the invocation ends as ``oom`` with this one-line message."""


class Aborted(Exception):
    """The invocation already failed: a node still waiting for its start gives up."""


class Gate:
    """Admission state of one invocation: a ``rules.Dispatcher`` behind a lock."""

    def __init__(
        self,
        mapping: Mapping[str, Mode],
        vram_mb: Mapping[str, float],
        *,
        budget_mb: float | None,
        cpu_slots: int | None,
    ) -> None:
        self.vram_mb = dict(vram_mb)  # task -> VRAM it holds on a GPU mode
        self._rules = rules.Dispatcher.by_arrival(mapping, self.vram_mb, budget_mb=budget_mb, cpu_slots=cpu_slots)
        self.peak_vram_mb = 0.0
        self.vram_timeline: list[tuple[float, float]] = [(0.0, 0.0)]  # (perf_counter s, MB in use)
        self._refused: dict[str, str] = {}  # task -> why the rules refused its start (one line)
        self._aborted = False
        self._cond = threading.Condition()

    @property
    def vram_in_use_mb(self) -> float:
        return self._rules.vram_in_use_mb

    @property
    def aborted(self) -> bool:
        """Has the invocation failed (``abort``)?"""
        return self._aborted

    def enter(self, task: str) -> None:
        """Block until ``task`` may start; raise ``Infeasible`` or ``Aborted``."""
        with self._cond:
            if self._aborted:
                raise Aborted
            self._rules.arrive(task)
            self._admit()
            self._wait(lambda: task in self._rules.running or task in self._refused)
            if task in self._refused:
                raise Infeasible(self._refused.pop(task))

    def leave(self, task: str) -> None:
        """``task`` ended (or failed): release its slot, queue and VRAM."""
        with self._cond:
            self._rules.finish(task)
            self._record_vram()
            self._admit()

    def abort(self) -> None:
        """The invocation failed: every waiting ``enter`` raises ``Aborted``."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def _admit(self) -> None:
        """Start what the rules allow now; a refused start fails its own node only (its waiting
        ``enter`` raises ``Infeasible``). Called with the lock held; wakes every waiter."""
        while isinstance(decision := self._rules.poll(), rules.Infeasible):
            self._refused[decision.task] = decision.message
            self._rules.withdraw(decision.task)
        self._record_vram()
        self._cond.notify_all()

    def _record_vram(self) -> None:
        now_mb = self._rules.vram_in_use_mb
        self.peak_vram_mb = max(self.peak_vram_mb, now_mb)
        if now_mb != self.vram_timeline[-1][1]:
            self.vram_timeline.append((time.perf_counter(), now_mb))

    def _wait(self, ok: Callable[[], bool]) -> None:
        """Wait (lock held) until ``ok()``; ``Aborted`` once the invocation failed."""
        while not ok():
            if self._aborted:
                raise Aborted
            self._cond.wait()
        if self._aborted:
            raise Aborted
