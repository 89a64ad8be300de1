"""Simulated tools in real time, on one simulated machine shared by every workflow a process serves.

``SharedMachine`` is the stream simulator (``testbeds/stream.py``) driven by the wall clock: one
GPU with one VRAM budget, one GPU queue (FIFO across invocations) and ``cpu_slots`` CPU slots,
shared by every invocation in flight, whatever its workflow; GPU tasks of different invocations
slow each other down by the world's contention law, exactly as in ``agentsched load``. A run
(``RealtimeTestbed.run``, one per invocation, in the caller's thread) *arrives* in that stream at the
simulated time of its call, carrying the mapping its workflow's policy chose, and the calling
thread sleeps until the simulator says it ended (SimPy-rt style: the figures are the simulator's,
only the answer waits). A clock thread moves the simulation along with the wall clock, ``time_scale``
simulated ms per wall ms (1: real time; 10: a 60 s simulated stream runs in 6 s).

The start rules are the stream's with the service's rule for ``gpu_now`` (``gpu_now_waits``): a
``gpu_now`` task whose VRAM does not fit beside what the other invocations hold waits for it, so
co-scheduling never causes an oom (an invocation is ``oom`` only when its own mapping would be,
run alone); ``gpu_queue`` waits in the shared queue for its VRAM; a ``cpu`` task waits for a free slot. The world stays in here: a
policy sees the ``Execution`` of its own invocation only (its spans, times relative to its arrival).

Live placement (``decider``, ``serve --placement live``): a run that arrives with an empty mapping
has each task placed when it becomes ready by a stream decider over the machine's live state (the
load-aware planner, ``planner/traffic.py``, as in ``agentsched load``), which also decides whether
the invocation starts now or waits at the door; a run that brings a mapping (a pinned one) still
runs it as brought.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.live import Decider, Invocation, MachineSnapshot, PlanDecider
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import TestbedSpec
from agentsched.testbeds.stream import DEFAULT_CPU_SLOTS, StreamSim

_LIVE = ("waiting", "running")
T = TypeVar("T")


class _BroughtMapping(PlanDecider):
    """Each invocation runs the mapping it arrived with (its workflow's policy chose it)."""

    name = "service-policy"

    def plan(self, inv: Invocation, live: MachineSnapshot) -> Mapping[str, Mode]:
        return inv.mapping


class SharedMachine:
    """One simulated machine for every served workflow, in scaled real time (module docstring)."""

    def __init__(
        self,
        workflows: Sequence[Workflow],
        spec: TestbedSpec,
        *,
        vram_budget_mb: float | None,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        decider: Decider | None = None,
    ) -> None:
        if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
            raise TestbedError(f"time scale must be a finite number > 0, got {time_scale!r}")
        self.time_scale = float(time_scale)  # simulated ms per wall ms
        self.cpu_slots = spec.cpu_slots or DEFAULT_CPU_SLOTS
        # why a late-binding decider still runs a brought mapping: the stream simulator asks it only
        # for the tasks an invocation arrived without (model/live.py)
        self.live_placement = decider is not None
        self.sim = StreamSim(
            list(workflows),
            (),
            decider or _BroughtMapping(),
            vram_budget_mb=vram_budget_mb,
            cpu_slots=self.cpu_slots,
            noise_sigma=spec.noise_sigma or 0.0,
            seed=spec.seed,
            world=spec.world,
            gpu_now_waits=True,
            keep_spans=True,
        )
        self.sim.begin()
        self._index = {wf.name: i for i, wf in enumerate(workflows)}
        self._clock = clock
        self._t0 = clock()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._drive, name="agentsched-sim-clock", daemon=True)
        self._thread.start()

    # ---- what the metrics show ------------------------------------------------------------------
    @property
    def budget_mb(self) -> float:
        return math.inf if self.sim.vram_budget_mb is None else self.sim.vram_budget_mb

    @property
    def reserved_mb(self) -> float:
        """VRAM held by the tasks running now (MB)."""
        return self.sim.vram_in_use_mb

    @property
    def peak_reserved_mb(self) -> float:
        """The most VRAM ever held at once (MB)."""
        return self.sim.peak_vram_mb

    def now_ms(self) -> float:
        """Simulated time now: wall time since the start, scaled."""
        return (self._clock() - self._t0) * 1000.0 * self.time_scale

    # ---- runs -----------------------------------------------------------------------------------
    def run(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution:
        """One invocation of ``workflow`` under ``mapping``, arriving now; returns when it ended. With
        live placement an empty ``mapping`` leaves every task to the decider."""
        index = self._index.get(workflow.name)
        if index is None:
            raise TestbedError(f"workflow {workflow.name} is not one the shared machine was built for")
        if not mapping and not self.live_placement:
            raise TestbedError(
                f"no mapping for workflow {workflow.name}, and the shared machine places no task "
                "itself (live placement is off)"
            )
        with self._cond:
            self._catch_up()
            inv = self.sim.arrive(index, dict(mapping))
            self._cond.notify_all()  # the clock thread's next event may be sooner now
            while inv.status in _LIVE:
                if self._closed:
                    raise TestbedError("the shared simulated machine is closed")
                self._cond.wait()
            spans = self.sim.spans.pop(inv.id, [])  # type: ignore[union-attr]
        return self._execution(inv, spans)

    def _execution(self, inv: Invocation, spans: list[TaskSpan]) -> Execution:
        spans.sort(key=lambda s: s.start_ms)
        elapsed_ms = inv.end_ms - inv.arrival_ms  # type: ignore[operator]
        extra = {"arrival_ms": inv.arrival_ms, "admitted_ms": inv.admitted_ms}
        if inv.status == "ok":
            return Execution(
                status=Status.OK,
                mapping=dict(inv.mapping),
                e2e_ms=elapsed_ms,
                elapsed_ms=elapsed_ms,
                peak_vram_mb=_peak_mb(spans),
                spans=tuple(spans),
                testbed="sim",
                extra=extra,
            )
        if inv.status == "oom":
            need = max((inv.cards[t].vram_needed_mb for t, m in inv.mapping.items() if m is not Mode.CPU), default=0.0)
            msg = (
                f"a GPU start did not fit beside the VRAM its own invocation held "
                f"(budget {self.budget_mb:,.0f} MB): the mapping runs out of VRAM alone"
            )
            return Execution(
                status=Status.OOM,
                mapping=dict(inv.mapping),
                e2e_ms=None,
                elapsed_ms=elapsed_ms,
                peak_vram_mb=need,
                spans=tuple(spans),
                message=msg,
                testbed="sim",
                extra=extra,
            )
        return Execution(
            status=Status.ERROR,
            mapping=dict(inv.mapping),
            e2e_ms=None,
            elapsed_ms=elapsed_ms,
            peak_vram_mb=0.0,
            spans=tuple(spans),
            testbed="sim",
            extra=extra,
            message=f"a mode outside workflow {inv.workflow.name}'s decision space",
        )

    # ---- the clock thread -----------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Process every event up to now (under the lock); wake the runs waiting when one ended."""
        if self.sim.advance_to(self.now_ms()):
            self._cond.notify_all()

    def _drive(self) -> None:
        with self._cond:
            while not self._closed:
                self._catch_up()
                due_ms = self.sim.next_event_ms()
                # sleep until the next simulated event, or until a new arrival (notify) changes it
                wait_s = None if math.isinf(due_ms) else max(0.0, (due_ms - self.now_ms()) / 1000.0 / self.time_scale)
                self._cond.wait(wait_s)

    def under_lock(self, fn: Callable[[], T]) -> T:
        """``fn()`` while the simulation stands still: its decider's state read or set safely (the
        clock thread moves it under this lock)."""
        with self._cond:
            return fn()

    def poke(self) -> None:
        """Wake the clock thread (a test's clock moved)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)


def _peak_mb(spans: Sequence[TaskSpan]) -> float:
    """The most VRAM an invocation's own tasks held at once."""
    events = sorted(
        [(s.start_ms, s.vram_mb) for s in spans if s.vram_mb > 0]
        + [(s.end_ms, -s.vram_mb) for s in spans if s.vram_mb > 0 and s.end_ms is not None],
        key=lambda e: (e[0], e[1]),
    )  # at one instant, releases before starts
    held = peak = 0.0
    for _, d in events:
        held += d
        peak = max(peak, held)
    return peak


class RealtimeTestbed(Testbed):
    """One workflow's testbed on the shared machine: runs go to it; isolated figures (preflight,
    ``expected``) come from the plain simulator ``inner``."""

    concurrent_runs = True  # Runtime: runs may overlap (the shared machine serialises the simulation)
    deterministic = False

    def __init__(self, inner: Testbed, machine: SharedMachine) -> None:
        self.inner = inner
        self.machine = machine
        self.name = inner.name

    def run(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None, inputs: Any = None
    ) -> Execution:
        return self.machine.run(workflow, mapping)

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution | None:
        return self.inner.expected(workflow, mapping)

    def begin_round(self, index: int) -> None:
        self.inner.begin_round(index)

    def preflight(self, workflow: Workflow) -> None:
        self.inner.preflight(workflow)

    def close(self) -> None:
        self.inner.close()
