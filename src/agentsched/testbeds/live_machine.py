"""The live state of a real machine, for placing each task when it becomes ready (live placement).

On the simulator the stream simulator is the machine and knows everything (``stream.py``). On the
local testbed the machine is this process: every invocation in flight runs its own ``Driver`` run
on its own thread, and a ``LiveMachine`` shared by all of them keeps what a serving system can see
of the load, in the shape decision code reads (``model/live.py``'s ``MachineSnapshot``):

* each task placed and not ended: its card, where it runs, when it was placed, when its run really
  began (``run_started``, told by the backend from the task's thread: a CPU slot taken, a GPU
  instance ready), its VRAM;
* VRAM in use: what the ``gpu_now`` tasks placed hold from their placement (so two concurrent
  decisions never count the same free VRAM), and the queued ones from their turn;
* the CPU slots: ``cpu_slots`` (the process's, ``ToolPool.cpu_slot``), the CPU tasks running and those
  placed and waiting for a slot, in placement order (the slots go FIFO);
* the GPU queue, one for the process as on the simulator: queued tasks of every invocation take
  their turn here (``gate``), one at a time, in placement order, when their VRAM fits beside what
  is held, and only then take their model (paying its load when it is not resident);
* the invocations at the door (``admit``) and in flight.

It calls one ``Decider`` (the load-aware planner) for every decision, under one lock, with
its clock frozen for the decision: ``admit`` (the invocation's thread waits at the door until
admitted, in arrival order), ``place`` (a mode, or None: the task is held and asked again when the
machine has changed; a held task takes the CPU when nothing at all runs, as in the simulator) and
``observe``: every ended task, with, for a GPU run, how long each other unit tool ran beside it
(the same overlap integrals as the simulator's), so contention is learned across invocations from
what really ran. A decider may not start ``gpu_now`` where its VRAM does not fit: such a start is
held instead (the service's promise: co-scheduling never causes an oom).

Nothing here knows how long a task will really take: only its card (the profiler's figures) and
what the backend reports.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.live import Decider, Invocation, MachineSnapshot, RunningView, TaskDone, overlap_since
from agentsched.model.rules import Ledger, Verdict
from agentsched.model.workflow import Mode, Workflow, effective_mode
from agentsched.testbeds.driver import Placer
from agentsched.testbeds.real import Cancelled

ADMIT_POLL_S = 0.01  # an invocation at the door is asked about again at least this often
T = TypeVar("T")


@dataclass(slots=True)
class _Placed:
    """A task placed and not ended."""

    inv: Invocation
    task: str
    card: ToolCard
    mode: Mode  # where it really runs
    placed_ms: float
    vram_mb: float  # what it holds on the GPU (0 on the CPU)
    unit: str  # its unit tool (clip for clip_x12): the key of the overlap integrals
    ready_ms: float  # when it was first asked (ready; before a hold)
    began_ms: float | None = None  # GPU: from when it holds its VRAM (gpu_now: placed; queued: its turn)
    run_ms: float | None = None  # when its run began (None: waiting for a slot, the queue, its instance)
    seen: dict[str, float] | None = None  # GPU runs: the overlap integrals when the run began
    in_job: bool = False  # its job began (``gate``): only the job's return releases it then


class LiveMachine:
    """One process's machine as live placement sees it (module docstring)."""

    def __init__(
        self,
        decider: Decider,
        workflows: Sequence[Workflow],
        *,
        vram_budget_mb: float | None,
        cpu_slots: int,
        seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if isinstance(cpu_slots, bool) or not isinstance(cpu_slots, int) or cpu_slots < 1:
            raise TestbedError(f"live machine: cpu slots must be an integer >= 1, got {cpu_slots!r}")
        if not getattr(decider, "late_binding", False):
            raise TestbedError(f"live machine: decider {decider.name} does not place tasks when they become ready")
        self.decider = decider
        self.vram_budget_mb = vram_budget_mb
        self.cpu_slots = cpu_slots
        self._clock = clock
        self._t0 = clock()
        self.cond = threading.Condition()
        self._ids = itertools.count()
        self._index = {wf.name: i for i, wf in enumerate(workflows)}
        self.closed = False
        self.now_ms = 0.0  # moved by _tick only: a decision sees one instant
        self.version = 0  # changes whenever a task is placed, starts or ends
        self.ledger = Ledger(vram_budget_mb, cpu_slots)  # the VRAM held and the GPU queue's turn (the start rules')
        self.peak_vram_mb = 0.0
        self.placed: dict[tuple[int, str], _Placed] = {}
        self.cpu_fifo: list[tuple[Invocation, str, float]] = []  # CPU tasks placed, waiting for a slot
        self.gpu_queue: list[tuple[Invocation, str, float]] = []  # queued tasks placed, waiting their turn
        self.queue_busy: tuple[int, str] | None = None  # the queued task whose turn it is (until it ends)
        self.admission: list[Invocation] = []  # invocations at the door, in arrival order
        self.in_flight = 0
        self.overlap: dict[str, float] = {}  # unit tool -> integral over time of its GPU runs in progress
        decider.start_stream(list(workflows), random.Random(seed))

    # ---- what the service's metrics show --------------------------------------------------------
    @property
    def reserved_mb(self) -> float:
        """VRAM held by the GPU tasks placed now (MB)."""
        return self.vram_in_use_mb

    @property
    def peak_reserved_mb(self) -> float:
        return self.peak_vram_mb

    @property
    def budget_mb(self) -> float:
        return math.inf if self.vram_budget_mb is None else self.vram_budget_mb

    # ---- what a decider reads ------------------------------------------------------------------
    def snapshot(self) -> MachineSnapshot:
        """The machine now (its clock as the last ``tick`` set it), frozen, as a decider reads it."""
        return MachineSnapshot.of(self, tuple(self.running_views(True)), tuple(self.running_views(False)))

    @property
    def vram_in_use_mb(self) -> float:
        return self.ledger.vram_in_use_mb

    @property
    def cpu_busy(self) -> int:
        return sum(1 for p in self.placed.values() if p.mode is Mode.CPU and p.run_ms is not None)

    @property
    def cpu_waiting_ms(self) -> float:
        return sum(inv.cards[t].cpu_ms for inv, t, _ in self.cpu_fifo)

    @property
    def queue_backlog_ms(self) -> float:
        return sum(inv.cards[t].load_needed_ms + (inv.cards[t].gpu_ms or 0.0) for inv, t, _ in self.gpu_queue)

    def running_views(self, gpu: bool) -> list[RunningView]:
        """The tasks running (GPU: from when they hold their VRAM), with card-based remaining times.
        A queued task is ``loading`` until its instance is ready (its load, then its run); a
        ``gpu_now`` one presses from its placement: its instance is warm in a serving process, and
        its run starts within moments (counted as loading, its siblings placed in the same instant
        would not see it press, and would crowd the GPU)."""
        out = []
        for p in self.placed.values():
            on_gpu = p.mode is not Mode.CPU
            if on_gpu != gpu or (p.began_ms if on_gpu else p.run_ms) is None:
                continue
            loading = p.mode is Mode.GPU_QUEUE and p.run_ms is None
            # as the simulator shows it: a GPU task's time from when it holds its VRAM (a queued one's
            # load included), its card time (plus the load for a queued one) minus that
            elapsed = self.now_ms - (p.began_ms if on_gpu else p.run_ms)  # type: ignore[operator]
            load = p.card.load_needed_ms if p.mode is Mode.GPU_QUEUE else 0.0
            iso = (p.card.gpu_ms or 0.0) + load if on_gpu else p.card.cpu_ms
            out.append(RunningView(p.card, p.mode, elapsed, loading, p.vram_mb, max(0.0, iso - elapsed)))
        return out

    # ---- invocations ----------------------------------------------------------------------------
    def placer(self, workflow: Workflow, mapping: Mapping[str, Mode] | None = None) -> LivePlacer:
        """The placer of one new invocation of ``workflow`` (``Driver.run_live``). With ``mapping``
        (a pinned one) its tasks run as mapped, on this machine's books: admitted at once, never
        asked of the decider, and a ``gpu_now`` start waits for its VRAM like any other."""
        with self.cond:
            self.tick()
            inv = Invocation(
                next(self._ids), self._index.get(workflow.name, -1), workflow, self.now_ms, dict(workflow.task_cards)
            )
        return LivePlacer(self, inv, mapping)

    def under_lock(self, fn: Callable[[], T]) -> T:
        """``fn()`` while no decision is made (its decider's state read or set safely)."""
        with self.cond:
            return fn()

    def close(self) -> None:
        """Refuse further decisions; wake every invocation waiting at the door or holding a task."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # ---- under the lock -------------------------------------------------------------------------
    def tick(self) -> None:
        """Move the clock to now, integrating the GPU runs in progress (per unit tool)."""
        now = (self._clock() - self._t0) * 1000.0
        dt = now - self.now_ms
        if dt > 0:
            for p in self.placed.values():
                if p.mode is not Mode.CPU and p.run_ms is not None:
                    self.overlap[p.unit] = self.overlap.get(p.unit, 0.0) + dt
            self.now_ms = now

    def changed(self) -> None:
        self.version += 1
        self.cond.notify_all()

    def check_open(self) -> None:
        if self.closed:
            raise TestbedError("the live machine is closed")

    def anything_runs(self) -> bool:
        return bool(self.placed)

    def register(self, inv: Invocation, task: str, mode: Mode, ready_ms: float) -> Mode:
        card = inv.cards[task]
        real = effective_mode(card, mode)
        inv.mapping[task] = mode
        p = _Placed(
            inv,
            task,
            card,
            real,
            self.now_ms,
            card.vram_needed_mb if real is not Mode.CPU else 0.0,
            split_amplified(card.name)[0],
            ready_ms,
        )
        self.placed[(inv.id, task)] = p
        if real is Mode.CPU:
            self.cpu_fifo.append((inv, task, self.now_ms))
        elif real is Mode.GPU_QUEUE:
            self.gpu_queue.append((inv, task, self.now_ms))
        else:
            p.began_ms = self.now_ms
            self.hold_vram(real, p.vram_mb)
        self.changed()
        return mode

    def hold_vram(self, mode: Mode, mb: float) -> None:
        """A GPU task takes its VRAM (``gpu_now``: placed; queued: its turn)."""
        self.ledger.hold(mode, mb)
        self.peak_vram_mb = max(self.peak_vram_mb, self.vram_in_use_mb)

    def release(self, p: _Placed) -> None:
        if p.began_ms is not None:
            self.ledger.release(p.mode, p.vram_mb)
        if self.queue_busy == (p.inv.id, p.task):
            self.queue_busy = None
        for line in (self.cpu_fifo, self.gpu_queue):
            _drop(line, p.inv, p.task)

    def overlap_of(self, p: _Placed) -> dict[str, float]:
        """How long each other unit tool ran beside GPU run ``p`` (its own unit's other runs included)."""
        if p.seen is None or p.run_ms is None:
            return {}
        return overlap_since(self.overlap, p.seen, p.unit, self.now_ms - p.run_ms)


class LivePlacer(Placer):
    """One invocation's late binding on a ``LiveMachine`` (``Driver.run_live`` calls it)."""

    def __init__(self, machine: LiveMachine, inv: Invocation, mapping: Mapping[str, Mode] | None = None) -> None:
        self.m = machine
        self.inv = inv
        self.fixed = None if mapping is None else dict(mapping)  # a pinned mapping: the decider is not asked
        self.vram_budget_mb = machine.vram_budget_mb
        self._asked: dict[str, int] = {}  # task held -> the machine's version when it was last asked
        self._ready_ms: dict[str, float] = {}  # task held -> when it was first asked (it was ready)

    def admit(self) -> None:
        m, inv = self.m, self.inv
        with m.cond:
            m.check_open()
            m.tick()
            if self.fixed is None:  # (a pinned invocation is not the decider's: it starts at once)
                m.admission.append(inv)
                try:
                    while not (
                        m.admission[0] is inv and (m.in_flight == 0 or self._decide(m.decider.admit, inv, m.snapshot()))
                    ):
                        m.cond.wait(ADMIT_POLL_S)
                        m.check_open()
                        m.tick()
                finally:
                    m.admission.remove(inv)
            inv.status, inv.admitted_ms = "running", m.now_ms
            wf = inv.workflow
            inv.waiting_preds = {t: len(p) for t, p in wf.preds.items()}
            inv.left = len(wf.tasks)
            m.in_flight += 1
            m.changed()

    def _decide(self, fn: Callable[..., T], *args: object) -> T:
        t0 = time.perf_counter_ns()
        try:
            return fn(*args)
        finally:
            self.inv.decision_ns += time.perf_counter_ns() - t0

    def place(self, task: str) -> Mode | None:
        m, inv = self.m, self.inv
        with m.cond:
            m.check_open()
            if self._asked.get(task) == m.version:  # nothing started or ended since: still held
                return None
            m.tick()
            if self.fixed is not None:
                mode = self._pinned(task)
            else:
                mode = self._decide(m.decider.place, inv, task, m.snapshot())
                if mode is not None and not self._fits(task, mode):
                    # a gpu_now start that does not fit would be an oom: it waits for the VRAM instead
                    mode = None if m.anything_runs() else Mode.CPU
                if mode is None and not m.anything_runs():  # nothing will free a resource: the CPU
                    mode = Mode.CPU
            if mode is None:
                self._asked[task] = m.version
                self._ready_ms.setdefault(task, m.now_ms)
                return None
            self._asked.pop(task, None)
            return m.register(inv, task, mode, self._ready_ms.pop(task, m.now_ms))

    def _fits(self, task: str, mode: Mode) -> bool:
        """Does ``task`` on ``mode`` fit now (anything but a ``gpu_now`` start always does)?"""
        card = self.inv.cards[task]
        return (
            effective_mode(card, mode) is not Mode.GPU_NOW
            or self.m.ledger.gpu_now(card.vram_needed_mb) is Verdict.START
        )

    def _pinned(self, task: str) -> Mode | None:
        """A pinned task runs as pinned: a ``gpu_now`` start waits for VRAM others hold (the service's
        promise), and one that can never fit (nothing else holds any) is its own mapping's oom."""
        assert self.fixed is not None
        mode = self.fixed[task]
        return mode if self._fits(task, mode) or not self.m.anything_runs() else None

    def gate(self, task: str, stop: threading.Event) -> None:
        m, key = self.m, (self.inv.id, task)
        with m.cond:
            p = m.placed.get(key)
            if p is None:  # withdrawn (its run failed) before its job began: it must not start off the books
                raise Cancelled("the run stopped before its task began")
            p.in_job = True
            if p.mode is not Mode.GPU_QUEUE:
                return
            while not (
                m.gpu_queue
                and m.gpu_queue[0][0] is self.inv
                and m.gpu_queue[0][1] == task
                and m.queue_busy is None
                and m.ledger.queue_head(p.vram_mb) is Verdict.START
            ):
                if stop.is_set() or m.closed:  # (its job's return releases its place in the queue)
                    raise Cancelled("the run stopped while its task waited in the GPU queue")
                m.cond.wait(ADMIT_POLL_S)
            m.tick()
            del m.gpu_queue[0]
            m.queue_busy, p.began_ms = key, m.now_ms
            m.hold_vram(Mode.GPU_QUEUE, p.vram_mb)
            m.changed()

    def run_started(self, task: str) -> None:
        m = self.m
        with m.cond:
            p = m.placed.get((self.inv.id, task))
            if p is None or p.run_ms is not None:
                return
            m.tick()
            p.run_ms = m.now_ms
            if p.mode is Mode.CPU:
                _drop(m.cpu_fifo, self.inv, task)
            else:
                p.seen = dict(m.overlap)
            m.changed()

    def finished(self, task: str, run_ms: float, load_ms: float) -> None:
        m, inv = self.m, self.inv
        with m.cond:
            m.tick()  # (first: its own run counts in the integrals up to now)
            p = m.placed.pop((inv.id, task), None)
            if p is None:
                return
            m.release(p)
            overlap = m.overlap_of(p)
            # from ready (its first ask: a hold counts, as on the simulator) to its start: a queued
            # task's turn (its load is load_ms)
            began = p.began_ms if p.began_ms is not None else p.run_ms if p.run_ms is not None else m.now_ms
            wait_ms = began - p.ready_ms
            m.decider.observe(
                TaskDone(inv.workflow.name, task, p.card, p.mode, run_ms, load_ms, max(0.0, wait_ms), overlap, inv.id)
            )
            inv.left -= 1
            for s in inv.workflow.succs[task]:
                inv.waiting_preds[s] -= 1
            m.changed()

    def released(self, task: str) -> None:
        m = self.m
        with m.cond:
            p = m.placed.pop((self.inv.id, task), None)
            if p is not None:  # nothing to learn from: it ended without an output
                m.tick()
                m.release(p)
                m.changed()

    def withdraw(self) -> None:
        self._release_where(lambda p: not p.in_job)

    def _release_where(self, which: Callable[[_Placed], bool]) -> None:
        m, inv = self.m, self.inv
        with m.cond:
            m.tick()
            for key in [k for k, p in m.placed.items() if k[0] == inv.id and which(p)]:
                m.release(m.placed.pop(key))
            m.changed()

    def wait_change(self, timeout_s: float) -> None:
        m = self.m
        with m.cond:
            version = m.version
            m.cond.wait_for(lambda: m.version != version or m.closed, timeout=timeout_s)

    def end(self) -> None:
        # why not the tasks whose job still runs: one abandoned over its timeout still holds its slot,
        # its VRAM, the GPU queue's turn; its job's return (finished or released) gives them back
        self._release_where(lambda p: not p.in_job)
        m, inv = self.m, self.inv
        with m.cond:
            if inv in m.admission:
                m.admission.remove(inv)
            if inv.status == "running":
                m.in_flight -= 1
            inv.status = "ok" if inv.left == 0 and inv.status == "running" else "error"
            inv.end_ms = m.now_ms
            m.decider.ended(inv)
            m.changed()


def _drop(line: list[tuple[Invocation, str, float]], inv: Invocation, task: str) -> None:
    for i, (v, t, _) in enumerate(line):
        if v is inv and t == task:
            del line[i]
            return
