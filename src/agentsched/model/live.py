"""What decision code sees of a running stream (``testbeds/stream.py``), and the interface it implements.

The *live state* (``LiveState``) is what a serving system can observe at decision time: the GPU
tasks running (their tool card, how long they have run, their VRAM, a card-based expected remaining
time), the VRAM in use, the GPU queue, the CPU slots busy and waiting, the invocations held at
admission. It never holds the world's contention parameters: a decider learns contention from the
``TaskDone`` reports (how long each run took, and for how long each other GPU tool ran beside it).

A ``StreamDecider`` decides, for each invocation:

* ``admit(inv, live)``: start it now (True) or hold it at admission (False; asked again at the
  next event; an invocation is always admitted when nothing else is in flight);
* ``plan(inv, live)``: the whole mapping at admission (``late_binding = False``), or
* ``place(inv, task, live)``: one task's mode when it becomes ready (``late_binding = True``);
  ``None`` holds the task (asked again at the next event; forced to the CPU when nothing runs);
* ``observe(done)``: a finished task, to learn from;
* ``ended(inv)``: an invocation ended (what it held, tasks waiting to be placed included, is gone).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow


@dataclass(slots=True)
class Invocation:
    """One invocation of a workflow in the stream (deciders read it; the simulator writes it)."""

    id: int
    wf_index: int  # index into the stream's workflow mix
    workflow: Workflow
    arrival_ms: float
    cards: dict[str, ToolCard]  # the workflow's task cards
    mapping: dict[str, Mode] = field(default_factory=dict)  # decided so far
    waiting_preds: dict[str, int] = field(default_factory=dict)
    left: int = 0  # tasks not finished yet
    status: str = "waiting"  # waiting (admission), running, ok, oom, error
    admitted_ms: float | None = None
    end_ms: float | None = None
    decision_ns: int = 0  # wall time spent in the decider for this invocation


@dataclass(frozen=True, slots=True)
class RunningView:
    """A task running (or loading) now, as a decider may see it."""

    card: ToolCard
    mode: Mode  # where it really runs
    elapsed_ms: float  # since it started (a queued task: since its load began)
    loading: bool  # a queued task still loading its model
    vram_mb: float
    expected_remaining_ms: float  # card-based (isolated) remaining time, >= 0: contention-blind


@dataclass(frozen=True, slots=True)
class TaskDone:
    """A finished task, reported to the decider."""

    workflow: str
    task: str
    card: ToolCard
    mode: Mode  # where it really ran
    run_ms: float  # its run phase (load excluded)
    load_ms: float
    wait_ms: float  # from ready to start (slot, queue or hold)
    overlap_ms: Mapping[str, float]  # GPU runs: unit tool -> ms it ran beside this run (others only)
    invocation: int = -1  # the id of its invocation (``Invocation.id``); -1: not known


def overlap_since(integrals: Mapping[str, float], seen: Mapping[str, float], unit: str,
                  own_ms: float) -> dict[str, float]:
    """How long each unit tool ran beside one GPU run (``TaskDone.overlap_ms``): ``integrals`` are,
    per unit tool, the integral over time of its GPU runs in progress, now; ``seen`` the same when
    the run began; the run's own ``own_ms`` (of unit ``unit``) is taken out of its unit's."""
    out: dict[str, float] = {}
    for u, total in integrals.items():
        d = total - seen.get(u, 0.0) - (own_ms if u == unit else 0.0)
        if d > 1e-6:
            out[u] = d
    return out


class LiveState:
    """The live state of a stream at decision time (module docstring). Built by the simulator."""

    def __init__(self, sim: object) -> None:
        self._sim = sim
        self._views: dict[bool, tuple[tuple, list[RunningView]]] = {}  # per device: (state key, views)

    @property
    def now_ms(self) -> float:
        return self._sim.now_ms  # type: ignore[attr-defined]

    @property
    def version(self) -> int:
        """Changes whenever a task starts or ends (with ``now_ms``, a key to cache derived figures)."""
        return self._sim.version  # type: ignore[attr-defined]

    @property
    def vram_budget_mb(self) -> float | None:
        return self._sim.vram_budget_mb  # type: ignore[attr-defined]

    @property
    def vram_in_use_mb(self) -> float:
        return self._sim.vram_in_use_mb  # type: ignore[attr-defined]

    @property
    def cpu_slots(self) -> int:
        return self._sim.cpu_slots  # type: ignore[attr-defined]

    @property
    def cpu_busy(self) -> int:
        return self._sim.cpu_busy  # type: ignore[attr-defined]

    @property
    def cpu_waiting(self) -> int:
        return len(self._sim.cpu_fifo)  # type: ignore[attr-defined]

    @property
    def queue_length(self) -> int:
        """Tasks waiting in the GPU queue (the admitted one excluded)."""
        return len(self._sim.gpu_queue)  # type: ignore[attr-defined]

    @property
    def admission_waiting(self) -> int:
        return len(self._sim.admission)  # type: ignore[attr-defined]

    @property
    def in_flight(self) -> int:
        """Invocations admitted and not finished."""
        return self._sim.in_flight  # type: ignore[attr-defined]

    def running(self, *, gpu: bool) -> list[RunningView]:
        """The tasks running on the GPU (``gpu=True``, queued ones loading included) or the CPU
        (computed once per state: callers must not modify the list)."""
        key = (self.version, self.now_ms, gpu)
        hit = self._views.get(gpu)
        if hit is None or hit[0] != key:
            hit = self._views[gpu] = (key, self._sim.running_views(gpu))  # type: ignore[attr-defined]
        return hit[1]

    @property
    def cpu_waiting_ms(self) -> float:
        """Card CPU time of the tasks waiting for a CPU slot, together."""
        return self._sim.cpu_waiting_ms  # type: ignore[attr-defined]

    @property
    def queue_backlog_ms(self) -> float:
        """Card load + GPU time of the tasks waiting in the GPU queue, together."""
        return self._sim.queue_backlog_ms  # type: ignore[attr-defined]

    def cpu_waiting_cards(self) -> list[ToolCard]:
        """Cards of the tasks waiting for a CPU slot, in FIFO order."""
        return [inv.cards[t] for inv, t, _ in self._sim.cpu_fifo]  # type: ignore[attr-defined]

    def queued_cards(self) -> list[ToolCard]:
        """Cards of the tasks waiting in the GPU queue, in queue order."""
        return [inv.cards[t] for inv, t, _ in self._sim.gpu_queue]  # type: ignore[attr-defined]

    def fits_now(self, vram_mb: float) -> bool:
        budget = self.vram_budget_mb
        return budget is None or self.vram_in_use_mb + vram_mb <= budget + 1e-9


class StreamDecider:
    """Base decider: admits everything, places every task on its card's faster device (gpu_now)."""

    name = "decider"
    late_binding = False

    def start_stream(self, workflows: Sequence[Workflow], rng: random.Random) -> None:
        """A new stream over ``workflows`` begins (reset what is per stream)."""

    def admit(self, inv: Invocation, live: LiveState) -> bool:
        return True

    def plan(self, inv: Invocation, live: LiveState) -> Mapping[str, Mode]:
        return {t: (Mode.GPU_NOW if c.has_gpu and c.gpu_ms < c.cpu_ms else Mode.CPU)  # type: ignore[operator]
                for t, c in inv.cards.items()}

    def place(self, inv: Invocation, task: str, live: LiveState) -> Mode | None:
        return self.plan(inv, live)[task]

    def observe(self, done: TaskDone) -> None:
        """Learn from a finished task (no-op by default)."""

    def ended(self, inv: Invocation) -> None:
        """``inv`` ended (ok, oom or error): forget what is kept about its tasks (no-op by default)."""


class StaticDecider(StreamDecider):
    """One fixed mapping per workflow name, applied to every invocation (FCFS, no admission)."""

    name = "static"

    def __init__(self, mappings: Mapping[str, Mapping[str, Mode]], name: str = "static") -> None:
        self.mappings = {k: dict(v) for k, v in mappings.items()}
        self.name = name

    def plan(self, inv: Invocation, live: LiveState) -> Mapping[str, Mode]:
        return self.mappings[inv.workflow.name]
