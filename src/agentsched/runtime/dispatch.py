"""Concurrent invocations of one runtime: who runs what, and in which order the loop sees it.

The loop (``run_loop`` on the runtime's thread) asks for executions one at a time. Most of them are
a round's runs: ``round_size`` executions of one mapping, consecutive, with nothing in between. The
dispatcher opens such a round as *slots*: every invocation waiting (or arriving while the round is
open) takes the next free slot and runs in its caller's own thread under the round's mapping, so
the invocations of one round run at once. The loop still consumes the slots in order, one per
``run()``, and records and returns each result in that order (a slot that finished early waits for
the ones before it). Every other execution (a probe the policy asks for inside propose/observe) is
taken by the loop itself, one at a time: probes stay serialised.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from agentsched.model.execution import Execution
from agentsched.model.workflow import Workflow
from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult


def _own(error: BaseException) -> BaseException:
    """A copy of ``error`` for one caller: the same instance raised in many threads (every invocation
    a close or a stop answers) would gather every thread's traceback in one."""
    mine = copy.copy(error)
    mine.__traceback__ = None
    return mine


class Stopped(BaseException):
    """Unwinds the loop thread when the runtime closes (a BaseException: no policy catches it)."""


class Request:
    """One invocation in flight: its inputs, then the slot it runs in, its execution, its result."""

    __slots__ = ("inputs", "assigned", "done", "mapping", "execution", "result", "error")

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.assigned = threading.Event()  # set when a slot (mapping) is given, or the loop took it
        self.done = threading.Event()  # set when result or error is there
        self.mapping: dict[str, Any] | None = None  # the slot's mapping (None: the loop runs it itself)
        self.execution: Execution | BaseException | None = None  # what the caller's run gave
        self.result: Any = None  # the InvokeResult
        self.error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.assigned.set()
        self.done.set()


class Dispatcher:
    """Pending invocations, and the open round's slots. See the module docstring."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: deque[Request] = deque()
        self._slots: list[Request] = []  # the open round's runs, by position (filled in arrival order)
        self._count = 0  # how many runs the open round still had when it opened (0: no open round)
        self._served = 0  # slots the loop has consumed
        self._mapping: dict[str, Any] | None = None
        self._stop: BaseException | None = None  # set once: every later request fails with it
        self._closing: BaseException | None = None  # drain(): later requests are refused with it
        self._started: list[Request] = []  # requests given a slot, until they are answered

    # ---- the caller's side ----------------------------------------------------------------------
    def submit(self, inputs: dict[str, Any], execute: Callable[[dict[str, Any], dict[str, Any]], Execution]) -> Any:
        """Queue one invocation, run it when it gets a slot, and return its result (or raise)."""
        req = Request(inputs)
        with self._cond:
            if self._stop is not None or self._closing is not None:
                raise _own(self._stop or self._closing)  # type: ignore[arg-type]
            self._pending.append(req)
            self._fill()
            self._cond.notify_all()
        req.assigned.wait()
        if req.mapping is not None and not req.done.is_set():
            try:
                x: Execution | BaseException = execute(req.mapping, req.inputs)
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which stops on it
                x = e
            with self._cond:
                req.execution = x
                self._cond.notify_all()
        req.done.wait()
        if req.error is not None:
            raise _own(req.error)
        return req.result

    @property
    def round_open(self) -> bool:
        """A round's slots are open: its remaining runs must come from them, in order."""
        with self._cond:
            return self._count > 0

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._slots) - self._served

    # ---- the loop's side ------------------------------------------------------------------------
    def take(self) -> Request:
        """The next pending invocation, for the loop to run itself (a probe); blocks until one comes."""
        with self._cond:
            while not self._pending:
                self._check_stop()
                self._cond.wait()
            req = self._pending.popleft()
            self._started = [r for r in self._started if not r.done.is_set()]
            self._started.append(req)  # drain() waits for it as for a round's run
        req.assigned.set()
        return req

    def next_slot(self, mapping: dict[str, Any], runs_left: int) -> Request:
        """The round's next run, in order, once its caller has run it under ``mapping``. Opens the
        round (``runs_left`` runs of ``mapping``, this one included) when none is open."""
        with self._cond:
            if self._count == 0:
                self._slots, self._count, self._served, self._mapping = [], runs_left, 0, dict(mapping)
                self._fill()
            while True:
                # stopped first: a run that ends now was answered "closed" by stop(), and is not recorded
                self._check_stop()
                if self._served < len(self._slots) and self._slots[self._served].execution is not None:
                    req = self._slots[self._served]
                    self._served += 1
                    if self._served == self._count:  # the round is complete: the next one opens anew
                        self._slots, self._count, self._served, self._mapping = [], 0, 0, None
                    return req
                self._cond.wait()

    def drain(self, error: BaseException, wait_s: float) -> int:
        """Refuse later requests and fail the pending ones with ``error`` (they have not started);
        wait up to ``wait_s`` for those running in a slot to be answered, which the loop does once
        it has recorded them. Returns how many were still running."""
        with self._cond:
            self._closing = error
            waiting = list(self._pending)
            self._pending.clear()
            started = [r for r in self._started if not r.done.is_set()]
        for req in waiting:
            req.finish(error=error)
        deadline = time.monotonic() + wait_s
        for req in started:
            req.done.wait(max(0.0, deadline - time.monotonic()))
        return sum(1 for r in started if not r.done.is_set())

    def stop(self, error: BaseException) -> None:
        """Fail every waiting invocation with ``error`` and every later one (the loop has ended)."""
        with self._cond:
            if self._stop is None:
                self._stop = error
            waiting = list(self._pending) + self._slots[self._served :]
            self._pending.clear()
            self._cond.notify_all()
        for req in waiting:
            req.finish(error=error)

    # ---- inside the lock ------------------------------------------------------------------------
    def _fill(self) -> None:
        """Give the open round's free slots to pending invocations, oldest first."""
        self._started = [r for r in self._started if not r.done.is_set()]
        while self._pending and len(self._slots) < self._count:
            req = self._pending.popleft()
            req.mapping = self._mapping
            self._slots.append(req)
            self._started.append(req)
            req.assigned.set()

    def _check_stop(self) -> None:
        if self._stop is not None:
            raise Stopped


class _Tracked(Policy):
    """Delegates to the policy and notes whether the loop is inside it (then a run is a probe)."""

    def __init__(self, inner: Policy, recorded: Callable[[int], Proposal | None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.online = inner.online
        self.reproducible = inner.reproducible
        self.in_policy = False  # True while reset/propose/observe run: executions are probes
        self.round = 0  # the round being proposed or observed
        # a stored round's proposal while a replay lasts (None: ask the policy); used only for a
        # policy that is not reproducible, so a replay never asks an LLM again for an old round
        self.recorded = recorded

    @property
    def label(self) -> str:
        return self.inner.label

    def reset(self, ctx: PolicyContext) -> None:
        self.in_policy = True
        try:
            self.inner.reset(ctx)
        finally:
            self.in_policy = False

    def propose(self, round_index: int) -> Proposal:
        self.round = round_index
        if not self.inner.reproducible and self.recorded is not None:
            stored = self.recorded(round_index)
            if stored is not None:
                return stored
        self.in_policy = True
        try:
            return self.inner.propose(round_index)
        finally:
            self.in_policy = False

    def observe(self, result: RoundResult) -> dict[str, Any] | None:
        self.in_policy = True
        try:
            return self.inner.observe(result)
        finally:
            self.in_policy = False

    def check_workflow(self, workflow: Workflow) -> None:
        self.inner.check_workflow(workflow)

    def preflight(self, workflow: Workflow) -> None:
        self.inner.preflight(workflow)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()
