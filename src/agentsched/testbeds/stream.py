"""Stream simulator: invocations of several workflows arrive over time and share one machine.

The machine: one GPU with a VRAM budget shared by every invocation, ``cpu_slots`` CPU slots (a task
waits FIFO for a free slot), and one GPU queue (strict FIFO across invocations, one task at a
time, admitted when its VRAM fits beside what is held, paying its load first). GPU tasks of all
invocations contend by the world's law (``world.py``, ``laws.py``), as in the one-run simulator;
the world is never visible to decision code, which sees a ``MachineSnapshot`` (``model/live.py``).

Per invocation: on arrival it waits for admission (``Decider.admit``); once admitted its
source tasks are ready. A ready task's mode is the invocation's plan (decided at admission) or,
under late binding, the decider's ``place`` when it becomes ready (``None``: held). Then the
start rules of ``model/rules.py``, shared across invocations: ``cpu`` takes a slot; ``gpu_now``
starts at once and holds its VRAM; if it does not fit, the invocation is **oom** (it ends; its
running tasks are stopped and release what they hold; the stream goes on); ``gpu_queue`` joins the
queue (a head larger than the whole budget: oom). With ``gpu_now_waits`` (the service's rule,
``service/realtime.py``) a ``gpu_now`` task that fits beside its own invocation's VRAM but not beside
the others' waits (FIFO, started before the GPU queue's head) instead of ending as oom: only an
invocation that would run out of VRAM alone is oom, never one co-scheduling pushed out. A tool without a GPU implementation placed on a
GPU mode runs as a CPU task. A mode outside the workflow's decision space ends the invocation as
an **error**.

Latency of an invocation: its end minus its arrival (admission wait included). Time, contention
and noise are the machine's one kernel's (``kernel.Kernel``: each task's isolated work and load
multiplied at start by the world's noise factor drawn from the injected ``random.Random``; sigma
0: expected values). Same seed, same arrivals: same result. The resources are the start rules'
``Ledger`` (``model/rules.py``).

One way to drive it: ``begin``, then ``advance_to`` a time and ``arrive`` (``run`` does exactly
that with the arrivals given; the real-time service does it with the wall clock,
``service/realtime.py``). With ``keep_spans`` each invocation's typed task spans are kept (on its
own clock: zero at its arrival) in ``spans``; ``peak_vram_mb`` is the most VRAM ever held at once.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard
from agentsched.model.execution import TaskSpan
from agentsched.model.live import Decider, Invocation, MachineSnapshot, RunningView, TaskDone, overlap_since
from agentsched.model.rules import Ledger, Verdict
from agentsched.model.workflow import Mode, Workflow, effective_mode
from agentsched.testbeds.arrivals import Arrival
from agentsched.testbeds.kernel import Kernel, Running
from agentsched.testbeds.spec import MAX_NOISE_SIGMA
from agentsched.testbeds.world import World, load_world

DEFAULT_CPU_SLOTS = 16
_Entry = tuple[Invocation, str, float]  # (invocation, task, ready_ms)


@dataclass(frozen=True, slots=True)
class StreamResult:
    """What a stream run produced."""

    invocations: tuple[Invocation, ...]  # in arrival order, each ok/oom/error with its end (a run
    # stopped at ``stop_ms`` leaves the rest running/waiting, and arrivals after it out)
    end_ms: float  # when the last invocation ended
    gpu_busy_ms: float  # time with at least one GPU task in its run phase

    def latencies_ms(self) -> list[float]:
        return [i.end_ms - i.arrival_ms for i in self.invocations if i.status == "ok"]  # type: ignore[operator]

    def count(self, status: str) -> int:
        return sum(1 for i in self.invocations if i.status == status)


class StreamSim:
    """One stream run (see the module docstring), on the machine's kernel."""

    def __init__(
        self,
        workflows: Sequence[Workflow],
        arrivals: Sequence[Arrival],
        decider: Decider,
        *,
        vram_budget_mb: float | None,
        cpu_slots: int = DEFAULT_CPU_SLOTS,
        noise_sigma: float = 0.0,
        seed: int = 0,
        world: str | World | None = None,
        stop_ms: float | None = None,
        gpu_now_waits: bool = False,
        keep_spans: bool = False,
    ) -> None:
        if cpu_slots < 1:
            raise TestbedError(f"cpu_slots must be >= 1, got {cpu_slots}")
        if not (math.isfinite(noise_sigma) and 0 <= noise_sigma <= MAX_NOISE_SIGMA):
            raise TestbedError(f"noise_sigma must be in [0, {MAX_NOISE_SIGMA:g}], got {noise_sigma}")
        if vram_budget_mb is not None and not (math.isfinite(vram_budget_mb) and vram_budget_mb > 0):
            raise TestbedError(f"vram_budget_mb must be > 0, got {vram_budget_mb}")
        self.workflows = list(workflows)
        self.arrivals = sorted(arrivals, key=lambda a: a.time_ms)
        self.decider = decider
        self.stop_ms = math.inf if stop_ms is None else stop_ms  # give up at this time (overload tests)
        self.world = load_world(world)
        self.rng = random.Random(seed)
        self.kernel = Kernel(self.world, noise_sigma=noise_sigma, rng=self.rng, track_overlap=True, label="stream")
        self.ledger = Ledger(vram_budget_mb, cpu_slots)
        self._cards = [wf.task_cards for wf in self.workflows]
        self.gpu_now_waits = gpu_now_waits
        self.in_flight = 0
        self.cpu_fifo: deque[_Entry] = deque()
        self.gpu_queue: deque[_Entry] = deque()
        self.vram_waiters: deque[_Entry] = deque()  # gpu_now tasks waiting for VRAM (gpu_now_waits)
        self.cpu_waiting_ms = 0.0  # card CPU time of the tasks in cpu_fifo (kept, not summed per query)
        self.queue_backlog_ms = 0.0  # card load + GPU time of the tasks in gpu_queue
        self.admission: deque[Invocation] = deque()
        self.held: list[_Entry] = []  # late binding: tasks the decider held
        self.ready: list[_Entry] = []  # ready, not yet routed
        self._held_version = -1  # the version when the held tasks were last asked
        self.invocations: list[Invocation] = []  # every arrival so far, in arrival order
        self.peak_vram_mb = 0.0
        self.spans: dict[int, list[TaskSpan]] | None = {} if keep_spans else None  # invocation id -> its spans
        self._views: tuple[tuple[int, float], tuple[RunningView, ...], tuple[RunningView, ...]] | None = None

    # ---- the machine as a snapshot reads it --------------------------------------------------------
    @property
    def now_ms(self) -> float:
        return self.kernel.now_ms

    @property
    def version(self) -> int:
        """Changes whenever a task starts, ends or ends its load (deciders cache per version)."""
        return self.kernel.version

    @property
    def runs(self) -> list[Running]:
        return self.kernel.runs

    @property
    def vram_budget_mb(self) -> float | None:
        return self.ledger.vram_budget_mb

    @property
    def cpu_slots(self) -> int:
        return self.ledger.cpu_slots  # type: ignore[return-value]

    @property
    def vram_in_use_mb(self) -> float:
        return self.ledger.vram_in_use_mb

    @property
    def cpu_busy(self) -> int:
        return self.ledger.cpu_busy

    @property
    def gpu_busy_ms(self) -> float:
        return self.kernel.gpu_busy_ms

    def running_views(self, gpu: bool) -> list[RunningView]:
        out = []
        now = self.now_ms
        for r in self.kernel.runs:
            if (r.mode is not Mode.CPU) != gpu:
                continue
            iso = r.card.gpu_ms if r.mode is not Mode.CPU else r.card.cpu_ms
            elapsed = now - r.start_ms
            load = r.card.load_needed_ms if r.mode is Mode.GPU_QUEUE else 0.0
            out.append(
                RunningView(r.card, r.mode, elapsed, r.loading, r.vram_mb, max(0.0, (iso or 0.0) + load - elapsed))
            )
        return out

    def snapshot(self) -> MachineSnapshot:
        """The machine now, frozen, as a decider reads it (the running views computed once per state)."""
        key = (self.kernel.version, self.kernel.now_ms)
        if self._views is None or self._views[0] != key:
            self._views = (key, tuple(self.running_views(True)), tuple(self.running_views(False)))
        return MachineSnapshot.of(self, self._views[1], self._views[2])

    # ---- driving it ---------------------------------------------------------------------------
    def run(self) -> StreamResult:
        """The whole stream of the arrivals given: ``begin``, then ``advance_to`` and ``arrive`` in
        turn, until every invocation ended (or ``stop_ms`` passed)."""
        self.begin()
        arrivals, i = self.arrivals, 0
        while (i < len(arrivals) or self.kernel.runs or self.admission) and self.now_ms <= self.stop_ms:
            next_arrival = arrivals[i].time_ms if i < len(arrivals) else math.inf
            self.advance_to(next_arrival, stop_ms=self.stop_ms)
            if i >= len(arrivals) or self.now_ms > self.stop_ms:
                continue
            together = []
            while i < len(arrivals) and arrivals[i].time_ms <= self.now_ms:
                together.append(arrivals[i].workflow)
                i += 1
            self.arrive_together(together)
        return StreamResult(tuple(self.invocations), self.now_ms, self.gpu_busy_ms)

    def begin(self) -> None:
        """Start the stream: the decider's per-stream state is reset."""
        self.decider.start_stream(self.workflows, random.Random(self.rng.random()))

    def next_event_ms(self) -> float:
        """When the next running task ends or ends its load (inf when nothing runs)."""
        return self.now_ms + self.kernel.next_dt() if self.kernel.runs else math.inf

    def advance_to(self, t_ms: float, *, stop_ms: float = math.inf) -> bool:
        """Process every task end up to ``t_ms`` (while the clock is not past ``stop_ms``), then set
        the clock there (a finite ``t_ms``); True when something ended."""
        events = False
        while self.now_ms <= stop_ms:
            finished = self._step_within(t_ms)
            if finished is None:
                break
            for r in finished:
                self._finish(r)
            self._dispatch()
            events = True
        if math.isfinite(t_ms) and self.now_ms <= stop_ms:
            self.kernel.advance_to(t_ms)  # (rates as the last _step_within set them)
        return events

    def _step_within(self, t_ms: float) -> list[Running] | None:
        if not self.kernel.runs:
            if math.isinf(t_ms) and self.admission:
                raise TestbedError("stream simulation stalled: nothing running and nothing arriving")
            return None
        return self.kernel.step_within(t_ms)

    def arrive(self, workflow: int, mapping: dict[str, Mode] | None = None) -> Invocation:
        """An invocation of workflow #``workflow`` arrives now, carrying ``mapping`` (for a decider
        that runs the mapping an invocation brings), and is dispatched."""
        return self.arrive_together([workflow], mapping)[0]

    def arrive_together(self, workflows: Sequence[int], mapping: dict[str, Mode] | None = None) -> list[Invocation]:
        """Invocations of ``workflows`` (indices into the mix) arrive now, in this order; then one dispatch."""
        invs = [self._arrive(w) for w in workflows]
        if mapping is not None:
            for inv in invs:
                inv.mapping = dict(mapping)
        self._dispatch()
        return invs

    # ---- events ------------------------------------------------------------------------------
    def _arrive(self, workflow: int) -> Invocation:
        if not 0 <= workflow < len(self.workflows):
            raise TestbedError(f"arrival names workflow #{workflow}; the mix has {len(self.workflows)}")
        wf = self.workflows[workflow]
        inv = Invocation(len(self.invocations), workflow, wf, self.now_ms, self._cards[workflow])
        self.invocations.append(inv)
        self.admission.append(inv)
        return inv

    def _admit(self, inv: Invocation) -> None:
        inv.status, inv.admitted_ms = "running", self.now_ms
        wf = inv.workflow
        inv.waiting_preds = {t: len(p) for t, p in wf.preds.items()}
        inv.left = len(wf.tasks)
        self.in_flight += 1
        if not self.decider.late_binding:
            t0 = time.perf_counter_ns()
            inv.mapping = dict(self.decider.plan(inv, self.snapshot()))
            inv.decision_ns += time.perf_counter_ns() - t0
        self.ready.extend((inv, t, self.now_ms) for t in wf.task_ids if not wf.preds[t])

    def _finish(self, r: Running) -> None:
        inv, task = r.key
        self.ledger.release(r.mode, r.vram_mb)
        now = self.now_ms
        overlap = {} if r.seen is None else overlap_since(self.kernel.overlap, r.seen, r.unit, now - r.run_start_ms)
        self.decider.observe(
            TaskDone(
                inv.workflow.name,
                task,
                r.card,
                r.mode,
                now - r.run_start_ms,
                r.run_start_ms - r.start_ms,
                r.start_ms - r.ready_ms,
                overlap,
                inv.id,
            )
        )
        if inv.status != "running":
            return
        if self.spans is not None:  # on the invocation's own clock: zero at its arrival
            self.spans.setdefault(inv.id, []).append(r.span(now, inv.arrival_ms, task))
        inv.left -= 1
        if inv.left == 0:
            self._end(inv, "ok")
            return
        wf = inv.workflow
        for s in wf.succs[task]:
            inv.waiting_preds[s] -= 1
            if inv.waiting_preds[s] == 0:
                self.ready.append((inv, s, now))

    def _end(self, inv: Invocation, status: str) -> None:
        inv.status, inv.end_ms = status, self.now_ms
        self.in_flight -= 1
        if status != "ok":  # stop what it still runs or waits for
            for r in [r for r in self.kernel.runs if r.key[0] is inv]:
                self.kernel.stop(r)
                self.ledger.release(r.mode, r.vram_mb)
            for q in (self.cpu_fifo, self.gpu_queue, self.vram_waiters):
                kept = [e for e in q if e[0] is not inv]
                q.clear()
                q.extend(kept)
            self.cpu_waiting_ms = sum(i.cards[t].cpu_ms for i, t, _ in self.cpu_fifo)
            self.queue_backlog_ms = sum(_queued_ms(i.cards[t]) for i, t, _ in self.gpu_queue)
            self.held = [e for e in self.held if e[0] is not inv]
            self.ready = [e for e in self.ready if e[0] is not inv]
            self.decider.ended(inv)

    # ---- dispatch (after every event) --------------------------------------------------------
    def _dispatch(self) -> None:
        self._admit_waiting()
        self._route_ready()
        # why again: routing can end the last invocation in flight (an oom); one waiting at the door
        # is then admitted now, since no later event would wake it
        while self.admission and self.in_flight == 0:
            self._admit_waiting()
            self._route_ready()
        if self.held and not self.kernel.runs:  # nothing will ever free a resource: the held task takes the CPU
            inv, task, ready_ms = self.held.pop(0)
            self._route(inv, task, ready_ms, forced=Mode.CPU)
            self._start_cpu()

    def _admit_waiting(self) -> None:
        """Admit the invocations at the door, in arrival order, while the decider lets them in."""
        while self.admission:
            head = self.admission[0]
            t0 = time.perf_counter_ns()
            ok = self.in_flight == 0 or self.decider.admit(head, self.snapshot())
            head.decision_ns += time.perf_counter_ns() - t0
            if not ok:
                break
            self.admission.popleft()
            self._admit(head)
            self._route_ready()  # the next admission decision sees this one's starts

    def _route_ready(self) -> None:
        """Route every ready and held task (in ready order), then start what the slots and queue allow."""
        if self.version == self._held_version:  # nothing started or ended: held tasks stay held
            pending, self.ready = self.ready, []
        else:
            pending, self.ready = self.held + self.ready, []
            self.held = []
        for inv, task, ready_ms in pending:
            if inv.status == "running":
                self._route(inv, task, ready_ms)
        self._start_waiters()
        self._start_cpu()
        self._start_queue()
        self._held_version = self.version

    def _route(self, inv: Invocation, task: str, ready_ms: float, forced: Mode | None = None) -> None:
        mode = forced if forced is not None else inv.mapping.get(task)
        if mode is None:  # late binding
            t0 = time.perf_counter_ns()
            mode = self.decider.place(inv, task, self.snapshot())
            inv.decision_ns += time.perf_counter_ns() - t0
            if mode is None:
                self.held.append((inv, task, ready_ms))
                return
        if mode not in inv.workflow.decision_space.modes:
            self._end(inv, "error")
            return
        inv.mapping[task] = mode
        card = inv.cards[task]
        real = effective_mode(card, mode)
        if real is Mode.CPU:
            self.cpu_fifo.append((inv, task, ready_ms))
            self.cpu_waiting_ms += card.cpu_ms
            return
        if real is Mode.GPU_QUEUE:
            self.gpu_queue.append((inv, task, ready_ms))
            self.queue_backlog_ms += _queued_ms(card)
            return
        own_mb = self._own_mb(inv) if self.gpu_now_waits else None
        verdict = self.ledger.gpu_now(card.vram_needed_mb, own_mb=own_mb, behind=bool(self.vram_waiters))
        if verdict is Verdict.START:
            self._start(inv, task, ready_ms, Mode.GPU_NOW)
        elif verdict is Verdict.WAIT:
            self.vram_waiters.append((inv, task, ready_ms))
        else:
            self._end(inv, "oom")

    def _own_mb(self, inv: Invocation) -> float:
        """The VRAM ``inv`` itself holds now."""
        return sum(r.vram_mb for r in self.kernel.runs if r.key[0] is inv)

    def _start_waiters(self) -> None:
        """Start the waiting gpu_now tasks, FIFO, while the head fits."""
        while self.vram_waiters:
            inv, task, ready_ms = self.vram_waiters[0]
            if not self.ledger.fits(inv.cards[task].vram_needed_mb):
                return
            self.vram_waiters.popleft()
            self._start(inv, task, ready_ms, Mode.GPU_NOW)

    def _start_cpu(self) -> None:
        while self.cpu_fifo and self.ledger.cpu() is Verdict.START:
            inv, task, ready_ms = self.cpu_fifo.popleft()
            self.cpu_waiting_ms = max(0.0, self.cpu_waiting_ms - inv.cards[task].cpu_ms)
            self._start(inv, task, ready_ms, Mode.CPU)

    def _start_queue(self) -> None:
        while self.gpu_queue:
            inv, task, ready_ms = self.gpu_queue[0]
            verdict = self.ledger.queue_head(inv.cards[task].vram_needed_mb)
            if verdict is Verdict.WAIT:
                return
            if verdict is Verdict.OOM:
                self._end(inv, "oom")  # (removes it from the queue)
                continue
            self.gpu_queue.popleft()
            self.queue_backlog_ms = max(0.0, self.queue_backlog_ms - _queued_ms(inv.cards[task]))
            self._start(inv, task, ready_ms, Mode.GPU_QUEUE)

    def _start(self, inv: Invocation, task: str, ready_ms: float, mode: Mode) -> None:
        card = inv.cards[task]
        vram = card.vram_needed_mb if mode is not Mode.CPU else 0.0
        load = card.load_needed_ms if mode is Mode.GPU_QUEUE else 0.0
        self.kernel.start((inv, task), card, mode, vram_mb=vram, load_ms=load, ready_ms=ready_ms)
        self.ledger.hold(mode, vram)
        self.peak_vram_mb = max(self.peak_vram_mb, self.ledger.vram_in_use_mb)


def _queued_ms(card: ToolCard) -> float:
    return card.load_needed_ms + (card.gpu_ms or card.cpu_ms)


def run_stream(workflows: Sequence[Workflow], arrivals: Sequence[Arrival], decider: Decider, **kwargs) -> StreamResult:
    """One stream run (keyword arguments: ``StreamSim``'s)."""
    return StreamSim(workflows, arrivals, decider, **kwargs).run()
