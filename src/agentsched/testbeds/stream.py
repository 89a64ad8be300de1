"""Stream simulator: invocations of several workflows arrive over time and share one machine.

The machine: one GPU with a VRAM budget shared by every invocation, ``cpu_slots`` CPU slots (a task
waits FIFO for a free slot), and one GPU queue (strict FIFO across invocations, one task at a
time, admitted when its VRAM fits beside what is held, paying its load first). GPU tasks of all
invocations contend by the world's law (``world.py``, ``laws.py``), as in the one-run simulator;
the world is never visible to decision code, which sees the ``LiveState`` (``model/live.py``).

Per invocation: on arrival it waits for admission (``StreamDecider.admit``); once admitted its
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

Latency of an invocation: its end minus its arrival (admission wait included). Noise: each task's
isolated work (and load) is multiplied at start by the world's noise factor drawn from the
injected ``random.Random`` (sigma 0: expected values). Same seed, same arrivals: same result.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.workflow import Mode, Workflow, effective_mode
from agentsched.testbeds.arrivals import Arrival
from agentsched.testbeds.laws import rate_function
from agentsched.testbeds.noise import noise_factor
from agentsched.testbeds.spec import MAX_NOISE_SIGMA
from agentsched.model.live import Invocation, LiveState, RunningView, StreamDecider, TaskDone, overlap_since
from agentsched.testbeds.world import World, load_world

_EPS = 1e-9
DEFAULT_CPU_SLOTS = 16


@dataclass(slots=True)
class _Run:
    """A started task."""

    inv: Invocation
    task: str
    card: ToolCard
    mode: Mode  # where it really runs
    vram_mb: float
    remaining: float  # isolated work left in the current phase (load, then run)
    loading: bool
    sens: float
    press: float
    work_ms: float
    load_ms: float
    start_ms: float
    run_start_ms: float
    ready_ms: float
    unit: str  # unit tool (clip for clip_x12): the key of the overlap integrals
    rate: float = 1.0
    seen: dict | None = None  # GPU runs: the overlap integrals when the run phase began


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
    """One stream run (see the module docstring). ``run()`` once per instance."""

    def __init__(self, workflows: Sequence[Workflow], arrivals: Sequence[Arrival], decider: StreamDecider, *,
                 vram_budget_mb: float | None, cpu_slots: int = DEFAULT_CPU_SLOTS, noise_sigma: float = 0.0,
                 seed: int = 0, world: str | World | None = None, stop_ms: float | None = None,
                 gpu_now_waits: bool = False) -> None:
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
        self.vram_budget_mb = vram_budget_mb
        self.cpu_slots = cpu_slots
        self.world = load_world(world)
        self._rates = rate_function(self.world.law)
        self._sigma = noise_sigma
        self.rng = random.Random(seed)
        self._params: dict[str, tuple[float, float]] = {}
        self._cards = [wf.task_cards for wf in self.workflows]
        # state
        self.now_ms = 0.0
        self.vram_in_use_mb = 0.0
        self.cpu_busy = 0
        self.in_flight = 0
        self.cpu_fifo: deque[tuple[Invocation, str, float]] = deque()  # (invocation, task, ready_ms)
        self.gpu_queue: deque[tuple[Invocation, str, float]] = deque()
        self.gpu_now_waits = gpu_now_waits
        self.vram_waiters: deque[tuple[Invocation, str, float]] = deque()  # gpu_now tasks waiting for VRAM
        self.cpu_waiting_ms = 0.0  # card CPU time of the tasks in cpu_fifo (kept, not summed per query)
        self.queue_backlog_ms = 0.0  # card load + GPU time of the tasks in gpu_queue
        self.queue_busy = False
        self.admission: deque[Invocation] = deque()
        self.held: list[tuple[Invocation, str, float]] = []  # late binding: tasks the decider held
        self.ready: list[tuple[Invocation, str, float]] = []  # ready, not yet routed
        self.runs: list[_Run] = []
        self.overlap: dict[str, float] = {}  # unit tool -> integral of its running GPU tasks over time
        self.gpu_busy_ms = 0.0
        self.version = 0  # bumped whenever a task starts, ends or ends its load (deciders cache per version)
        self._held_version = -1  # the version when the held tasks were last asked
        self.live = LiveState(self)
        self.done: list[Invocation] = []

    # ---- the live state's queries ------------------------------------------------------------
    def running_views(self, gpu: bool) -> list[RunningView]:
        out = []
        now = self.now_ms
        for r in self.runs:
            if (r.mode is not Mode.CPU) != gpu:
                continue
            iso = r.card.gpu_ms if r.mode is not Mode.CPU else r.card.cpu_ms
            elapsed = now - r.start_ms
            load = r.card.load_needed_ms if r.mode is Mode.GPU_QUEUE else 0.0
            out.append(RunningView(r.card, r.mode, elapsed, r.loading, r.vram_mb,
                                   max(0.0, (iso or 0.0) + load - elapsed)))
        return out

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> StreamResult:
        invs: list[Invocation] = []
        self.decider.start_stream(self.workflows, random.Random(self.rng.random()))
        arrivals, i = self.arrivals, 0
        while (i < len(arrivals) or self.runs or self.admission) and self.now_ms <= self.stop_ms:
            next_arrival = arrivals[i].time_ms if i < len(arrivals) else math.inf
            dt = self._next_finish_dt()
            if self.now_ms + dt <= next_arrival:
                finished = self._advance(dt, collect=True)
                for r in finished:
                    self._finish(r)
            else:
                self._advance(next_arrival - self.now_ms, collect=False)
                self.now_ms = next_arrival  # exact: no drift from summed dts
                while i < len(arrivals) and arrivals[i].time_ms <= self.now_ms:
                    invs.append(self._arrive(len(invs), arrivals[i]))
                    i += 1
            self._dispatch()
        return StreamResult(tuple(invs), self.now_ms, self.gpu_busy_ms)

    # ---- driven from outside: arrivals one at a time (the real-time service, service/realtime.py) --
    def begin(self) -> None:
        """Start a stream whose invocations arrive through ``arrive`` (instead of ``run()``)."""
        self.decider.start_stream(self.workflows, random.Random(self.rng.random()))
        self._arrived = 0

    def next_event_ms(self) -> float:
        """When the next running task ends or ends its load (inf when nothing runs)."""
        return self.now_ms + self._next_finish_dt() if self.runs else math.inf

    def advance_to(self, t_ms: float) -> bool:
        """Process every task end up to ``t_ms``, then set the clock there; True when something ended."""
        events = False
        while self.runs:
            dt = self._next_finish_dt()
            if self.now_ms + dt > t_ms:
                break
            for r in self._advance(dt, collect=True):
                self._finish(r)
            self._dispatch()
            events = True
        if t_ms > self.now_ms:
            self._advance(t_ms - self.now_ms, collect=False)
            self.now_ms = t_ms
        return events

    def arrive(self, workflow: int, mapping: dict[str, Mode] | None = None) -> Invocation:
        """An invocation of workflow #``workflow`` arrives now, carrying ``mapping`` (for a decider
        that runs the mapping an invocation brings), and is dispatched."""
        inv = self._arrive(self._arrived, Arrival(self.now_ms, workflow))
        self._arrived += 1
        if mapping is not None:
            inv.mapping = dict(mapping)
        self._dispatch()
        return inv

    def _next_finish_dt(self) -> float:
        runs = self.runs
        if not runs:
            return math.inf
        gpu = [r for r in runs if r.mode is not Mode.CPU and not r.loading]
        if len(gpu) > 1:
            for r, rate in zip(gpu, self._rates([r.sens for r in gpu], [r.press for r in gpu])):
                r.rate = rate
        elif gpu:
            gpu[0].rate = 1.0
        return min(r.remaining / r.rate if not r.loading else r.remaining for r in runs)

    def _advance(self, dt: float, *, collect: bool) -> list[_Run]:
        """Move the clock by ``dt`` (rates set by ``_next_finish_dt``); the runs that ended."""
        if not math.isfinite(dt):
            raise TestbedError("stream simulation stalled: nothing running and nothing arriving")
        if dt > 0:
            busy = False
            overlap = self.overlap
            for r in self.runs:
                if r.loading:
                    r.remaining -= dt
                elif r.mode is not Mode.CPU:
                    r.remaining -= dt * r.rate
                    overlap[r.unit] = overlap.get(r.unit, 0.0) + dt
                    busy = True
                else:
                    r.remaining -= dt
            if busy:
                self.gpu_busy_ms += dt
            self.now_ms += dt
        if not collect:
            return []
        finished = []
        below = _EPS * max(1.0, self.now_ms)
        for r in self.runs:
            if r.remaining <= below:
                if r.loading:  # load done: the run phase begins
                    r.loading, r.remaining, r.run_start_ms = False, r.work_ms, self.now_ms
                    self.version += 1
                    r.seen = dict(self.overlap)
                    if r.remaining > below:
                        continue
                finished.append(r)
        return finished

    # ---- events ------------------------------------------------------------------------------
    def _arrive(self, ident: int, a: Arrival) -> Invocation:
        if not 0 <= a.workflow < len(self.workflows):
            raise TestbedError(f"arrival names workflow #{a.workflow}; the mix has {len(self.workflows)}")
        wf = self.workflows[a.workflow]
        inv = Invocation(ident, a.workflow, wf, a.time_ms, self._cards[a.workflow])
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
            inv.mapping = dict(self.decider.plan(inv, self.live))
            inv.decision_ns += time.perf_counter_ns() - t0
        self.ready.extend((inv, t, self.now_ms) for t in wf.task_ids if not wf.preds[t])

    def _finish(self, r: _Run) -> None:
        self._release(r)
        inv = r.inv
        overlap = {} if r.seen is None else overlap_since(self.overlap, r.seen, r.unit, self.now_ms - r.run_start_ms)
        self.decider.observe(TaskDone(inv.workflow.name, r.task, r.card, r.mode, self.now_ms - r.run_start_ms,
                                      r.run_start_ms - r.start_ms, r.start_ms - r.ready_ms, overlap, inv.id))
        if inv.status != "running":
            return
        inv.left -= 1
        if inv.left == 0:
            self._end(inv, "ok")
            return
        wf = inv.workflow
        for s in wf.succs[r.task]:
            inv.waiting_preds[s] -= 1
            if inv.waiting_preds[s] == 0:
                self.ready.append((inv, s, self.now_ms))

    def _release(self, r: _Run) -> None:
        self.version += 1
        self.runs.remove(r)
        self.vram_in_use_mb = max(0.0, self.vram_in_use_mb - r.vram_mb)
        if r.mode is Mode.CPU:
            self.cpu_busy -= 1
        elif r.mode is Mode.GPU_QUEUE:
            self.queue_busy = False

    def _end(self, inv: Invocation, status: str) -> None:
        inv.status, inv.end_ms = status, self.now_ms
        self.in_flight -= 1
        if status != "ok":  # stop what it still runs or waits for
            for r in [r for r in self.runs if r.inv is inv]:
                self._release(r)
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
        if self.held and not self.runs:  # nothing will ever free a resource: the held task takes the CPU
            inv, task, ready_ms = self.held.pop(0)
            self._route(inv, task, ready_ms, forced=Mode.CPU)
            self._start_cpu()

    def _admit_waiting(self) -> None:
        """Admit the invocations at the door, in arrival order, while the decider lets them in."""
        live = self.live
        while self.admission:
            head = self.admission[0]
            t0 = time.perf_counter_ns()
            ok = self.in_flight == 0 or self.decider.admit(head, live)
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
            mode = self.decider.place(inv, task, self.live)
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
        elif real is Mode.GPU_QUEUE:
            self.gpu_queue.append((inv, task, ready_ms))
            self.queue_backlog_ms += _queued_ms(card)
        elif self.live.fits_now(card.vram_needed_mb) and not self.vram_waiters:
            self._start(inv, task, ready_ms, Mode.GPU_NOW)
        elif self.gpu_now_waits and self._fits_alone(inv, card.vram_needed_mb):
            self.vram_waiters.append((inv, task, ready_ms))
        else:
            self._end(inv, "oom")

    def _fits_alone(self, inv: Invocation, vram_mb: float) -> bool:
        """Would ``vram_mb`` fit beside what ``inv`` itself holds (nothing of other invocations)?"""
        own_mb = sum(r.vram_mb for r in self.runs if r.inv is inv)
        return self.vram_budget_mb is None or own_mb + vram_mb <= self.vram_budget_mb + _EPS

    def _start_waiters(self) -> None:
        """Start the waiting gpu_now tasks, FIFO, while the head fits."""
        while self.vram_waiters:
            inv, task, ready_ms = self.vram_waiters[0]
            if not self.live.fits_now(inv.cards[task].vram_needed_mb):
                return
            self.vram_waiters.popleft()
            self._start(inv, task, ready_ms, Mode.GPU_NOW)

    def _start_cpu(self) -> None:
        while self.cpu_fifo and self.cpu_busy < self.cpu_slots:
            inv, task, ready_ms = self.cpu_fifo.popleft()
            self.cpu_waiting_ms = max(0.0, self.cpu_waiting_ms - inv.cards[task].cpu_ms)
            self._start(inv, task, ready_ms, Mode.CPU)

    def _start_queue(self) -> None:
        while not self.queue_busy and self.gpu_queue:
            inv, task, ready_ms = self.gpu_queue[0]
            need = inv.cards[task].vram_needed_mb
            if self.vram_budget_mb is not None and need > self.vram_budget_mb + _EPS:
                self._end(inv, "oom")  # (removes it from the queue)
                continue
            if not self.live.fits_now(need):
                return
            self.gpu_queue.popleft()
            self.queue_backlog_ms = max(0.0, self.queue_backlog_ms - _queued_ms(inv.cards[task]))
            self._start(inv, task, ready_ms, Mode.GPU_QUEUE)

    def _start(self, inv: Invocation, task: str, ready_ms: float, mode: Mode) -> None:
        card = inv.cards[task]
        on_gpu = mode is not Mode.CPU
        unit = split_amplified(card.name)[0]
        sens, press = self._contention(card, unit) if on_gpu else (0.0, 0.0)
        load = self._noisy(card.load_needed_ms) if mode is Mode.GPU_QUEUE and card.load_needed_ms > 0 else 0.0
        work = self._noisy(card.gpu_ms if on_gpu else card.cpu_ms)  # type: ignore[arg-type]
        vram = card.vram_needed_mb if on_gpu else 0.0
        r = _Run(inv, task, card, mode, vram, load if load > 0 else work, load > 0, sens, press, work, load,
                 self.now_ms, self.now_ms, ready_ms, unit)
        if on_gpu and not r.loading:
            r.seen = dict(self.overlap)
        self.version += 1
        self.vram_in_use_mb += vram
        if mode is Mode.CPU:
            self.cpu_busy += 1
        elif mode is Mode.GPU_QUEUE:
            self.queue_busy = True
        self.runs.append(r)

    def _contention(self, card: ToolCard, unit: str) -> tuple[float, float]:
        hit = self._params.get(unit)
        if hit is None:  # looked up once per tool
            hit = self._params[unit] = self.world.params(card)
        return hit

    def _noisy(self, x: float) -> float:
        if self._sigma <= 0:
            return x
        noise = self.world.noise
        if noise.is_default:
            return x * math.exp(self.rng.gauss(0.0, self._sigma))
        return x * noise_factor(self.rng, self._sigma, noise)


def _queued_ms(card: ToolCard) -> float:
    return card.load_needed_ms + (card.gpu_ms or card.cpu_ms)


def run_stream(workflows: Sequence[Workflow], arrivals: Sequence[Arrival], decider: StreamDecider,
               **kwargs) -> StreamResult:
    """One stream run (keyword arguments: ``StreamSim``'s)."""
    return StreamSim(workflows, arrivals, decider, **kwargs).run()
