"""The start rules of ``model/rules.py`` when LangGraph, not agentsched, decides when a node
is called: a node blocks in ``enter`` until its placement may start, and ``leave`` releases it.

* ``cpu``: at most ``cpu_slots`` placeable nodes at once (None: no cap);
* ``gpu_now``: starts at once and holds its VRAM until it leaves; if that exceeds the VRAM budget
  the invocation is infeasible (``Infeasible``, reported as ``oom``), as in the paper;
* ``gpu_queue``: a FIFO queue (order of arrival) that runs one node at a time; the head is admitted
  when the queue is idle and its VRAM fits beside what is held; a head larger than the whole
  budget is infeasible.

Host-only tools placed on a GPU mode arrive here as ``cpu`` (the caller resolves that, as the
Dispatcher does). Thread-safe: LangGraph calls nodes of one step from a thread pool.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping

from agentsched.model.workflow import Mode


class Infeasible(Exception):
    """A start that cannot happen: the invocation ends as ``oom`` with this one-line message."""


class Aborted(Exception):
    """The invocation already failed: a node still waiting for its start gives up."""


class Gate:
    """Admission state of one invocation."""

    def __init__(self, mapping: Mapping[str, Mode], vram_mb: Mapping[str, float], *,
                 budget_mb: float | None, cpu_slots: int | None) -> None:
        self.mapping = dict(mapping)  # task -> where it really runs
        self.vram_mb = dict(vram_mb)  # task -> VRAM it holds on a GPU mode
        self.budget_mb = budget_mb  # None: no budget
        self.cpu_slots = cpu_slots  # None: no cap
        self.vram_in_use_mb = 0.0
        self.peak_vram_mb = 0.0
        self.vram_timeline: list[tuple[float, float]] = [(0.0, 0.0)]  # (perf_counter s, MB in use)
        self._cpu_running = 0
        self._queue: deque[object] = deque()  # tickets of waiting gpu_queue entries, FIFO
        self._queue_busy = False
        self._aborted = False
        self._cond = threading.Condition()

    def _fits(self, need_mb: float) -> bool:
        return self.budget_mb is None or self.vram_in_use_mb + need_mb <= self.budget_mb + 1e-9

    def _hold(self, need_mb: float) -> None:
        self.vram_in_use_mb += need_mb
        self.peak_vram_mb = max(self.peak_vram_mb, self.vram_in_use_mb)
        if need_mb:
            self.vram_timeline.append((time.perf_counter(), self.vram_in_use_mb))

    def enter(self, task: str) -> None:
        """Block until ``task`` may start; raise ``Infeasible`` or ``Aborted``."""
        mode = self.mapping[task]
        need = self.vram_mb.get(task, 0.0) if mode is not Mode.CPU else 0.0
        with self._cond:
            if mode is Mode.CPU:
                self._wait(lambda: self.cpu_slots is None or self._cpu_running < self.cpu_slots)
                self._cpu_running += 1
            elif mode is Mode.GPU_NOW:
                if not self._fits(need):
                    total = self.vram_in_use_mb + need
                    raise Infeasible(f"gpu_now task {task} needs {need:g} MB with {self.vram_in_use_mb:g} MB "
                                     f"held: {total:g} > budget {self.budget_mb:g} MB")
                self._hold(need)
            else:
                if self.budget_mb is not None and need > self.budget_mb + 1e-9:
                    raise Infeasible(f"gpu_queue task {task} needs {need:g} MB, more than the whole budget "
                                     f"{self.budget_mb:g} MB")
                ticket = object()
                self._queue.append(ticket)
                try:
                    self._wait(lambda: self._queue[0] is ticket and not self._queue_busy and self._fits(need))
                finally:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                self._queue_busy = True
                self._hold(need)

    def leave(self, task: str) -> None:
        """``task`` ended (or failed): release its slot, queue and VRAM."""
        mode = self.mapping[task]
        with self._cond:
            if mode is Mode.CPU:
                self._cpu_running -= 1
            else:
                need = self.vram_mb.get(task, 0.0)
                self.vram_in_use_mb = max(0.0, self.vram_in_use_mb - need)
                if need:
                    self.vram_timeline.append((time.perf_counter(), self.vram_in_use_mb))
                if mode is Mode.GPU_QUEUE:
                    self._queue_busy = False
            self._cond.notify_all()

    def abort(self) -> None:
        """The invocation failed: every waiting ``enter`` raises ``Aborted``."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def _wait(self, ok) -> None:  # noqa: ANN001 - a predicate, called with the lock held
        while not ok():
            if self._aborted:
                raise Aborted
            self._cond.wait()
        if self._aborted:
            raise Aborted
