"""What decision code sees of a shared machine, and the one contract every decider implements.

A ``MachineSnapshot`` is what a serving system can observe at decision time, frozen at that
instant: the GPU tasks running (their tool card, how long they have run, their VRAM, a card-based
expected remaining time), the VRAM in use, the GPU queue, the CPU slots busy and waiting, the
invocations held at admission. Every machine builds it the same way: the stream simulator
(``testbeds/stream.py``, also on a wall clock, ``service/realtime.py``) and the local machine's live
state (``testbeds/live_machine.py``). It never holds the world's contention parameters: a decider
learns contention from the ``TaskDone`` reports (how long each run took, and for how long each
other GPU tool ran beside it).

A ``Decider`` (abstract: the contract, one docstring per method) decides for each invocation
whether it starts now, and where each of its tasks runs: the whole mapping at admission (``plan``,
``late_binding = False``: ``PlanDecider``), or each task when it becomes ready (``place``,
``late_binding = True``). The machine calls: ``start_stream`` once, then per invocation ``admit``
(until True) -> ``plan`` or ``place`` per ready task ... -> ``ended``; and ``observe`` for every
task that ended.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Protocol

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow, fits_vram


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


def overlap_since(
    integrals: Mapping[str, float], seen: Mapping[str, float], unit: str, own_ms: float
) -> dict[str, float]:
    """How long each unit tool ran beside one GPU run (``TaskDone.overlap_ms``): ``integrals`` are,
    per unit tool, the integral over time of its GPU runs in progress, now; ``seen`` the same when
    the run began; the run's own ``own_ms`` (of unit ``unit``) is taken out of its unit's."""
    out: dict[str, float] = {}
    for u, total in integrals.items():
        d = total - seen.get(u, 0.0) - (own_ms if u == unit else 0.0)
        if d > 1e-6:
            out[u] = d
    return out


class MachineBooks(Protocol):
    """What a machine keeps that a snapshot reads (the stream simulator, the local live machine)."""

    @property
    def now_ms(self) -> float: ...
    @property
    def version(self) -> int: ...
    @property
    def vram_budget_mb(self) -> float | None: ...
    @property
    def vram_in_use_mb(self) -> float: ...
    @property
    def cpu_slots(self) -> int: ...
    @property
    def cpu_busy(self) -> int: ...
    @property
    def cpu_fifo(self) -> Sequence[tuple[Invocation, str, float]]: ...  # (invocation, task, ready_ms)
    @property
    def gpu_queue(self) -> Sequence[tuple[Invocation, str, float]]: ...
    @property
    def admission(self) -> Sized: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def cpu_waiting_ms(self) -> float: ...
    @property
    def queue_backlog_ms(self) -> float: ...


@dataclass(frozen=True, slots=True)
class MachineSnapshot:
    """The shared machine at one decision, frozen (module docstring). Built by the machine."""

    now_ms: float
    version: int  # changes whenever a task starts or ends (with ``now_ms``, a key to cache derived figures)
    vram_budget_mb: float | None  # None: none
    vram_in_use_mb: float
    cpu_slots: int
    cpu_busy: int
    cpu_waiting: int  # tasks waiting for a CPU slot
    queue_length: int  # tasks waiting in the GPU queue (the admitted one excluded)
    admission_waiting: int  # invocations held at the door
    in_flight: int  # invocations admitted and not finished
    cpu_waiting_ms: float  # card CPU time of the tasks waiting for a CPU slot, together
    queue_backlog_ms: float  # card load + GPU time of the tasks waiting in the GPU queue, together
    gpu_running: tuple[RunningView, ...] = ()  # on the GPU, queued ones loading included
    cpu_running: tuple[RunningView, ...] = ()
    waiting_cards: tuple[ToolCard, ...] = ()  # of the tasks waiting for a CPU slot, FIFO order
    queue_cards: tuple[ToolCard, ...] = ()  # of the tasks waiting in the GPU queue, queue order

    @classmethod
    def of(cls, m: MachineBooks, gpu: tuple[RunningView, ...], cpu: tuple[RunningView, ...]) -> MachineSnapshot:
        """The snapshot of machine ``m`` now, with its running tasks' views (GPU, CPU)."""
        return cls(
            m.now_ms,
            m.version,
            m.vram_budget_mb,
            m.vram_in_use_mb,
            m.cpu_slots,
            m.cpu_busy,
            len(m.cpu_fifo),
            len(m.gpu_queue),
            len(m.admission),
            m.in_flight,
            m.cpu_waiting_ms,
            m.queue_backlog_ms,
            gpu,
            cpu,
            tuple(inv.cards[t] for inv, t, _ in m.cpu_fifo),
            tuple(inv.cards[t] for inv, t, _ in m.gpu_queue),
        )

    def running(self, *, gpu: bool) -> tuple[RunningView, ...]:
        """The tasks running on the GPU (``gpu=True``, queued ones loading included) or the CPU."""
        return self.gpu_running if gpu else self.cpu_running

    def cpu_waiting_cards(self) -> tuple[ToolCard, ...]:
        """Cards of the tasks waiting for a CPU slot, in FIFO order."""
        return self.waiting_cards

    def queued_cards(self) -> tuple[ToolCard, ...]:
        """Cards of the tasks waiting in the GPU queue, in queue order."""
        return self.queue_cards

    def fits_now(self, vram_mb: float) -> bool:
        """Would ``vram_mb`` more fit beside what is held now?"""
        return fits_vram(self.vram_in_use_mb, vram_mb, self.vram_budget_mb)


class Decider(ABC):
    """Decides, on a machine shared by many invocations, when each starts and where its tasks run.

    Every decision reads a ``MachineSnapshot`` (never the simulated world); a decider learns only
    from ``observe``. The machine serialises the calls (one at a time).
    """

    #: the name the registry (``loop/registry.py``'s ``decider_by_name``) and reports give it
    name: str = "decider"
    #: True: tasks are placed when they become ready (``place``); False: at admission (``plan``)
    late_binding: bool = False

    def start_stream(self, workflows: Sequence[Workflow], rng: random.Random) -> None:  # noqa: B027 - an optional hook
        """A new stream over the mix ``workflows`` begins: reset what is kept per stream. ``rng`` is
        the only randomness a decider may use."""

    @abstractmethod
    def admit(self, inv: Invocation, snap: MachineSnapshot) -> bool:
        """Start ``inv`` now (True) or hold it at the door (False: asked again at the next event).
        Invocations are asked in arrival order; one is always admitted when none is in flight."""

    @abstractmethod
    def plan(self, inv: Invocation, snap: MachineSnapshot) -> Mapping[str, Mode]:
        """The whole mapping of ``inv`` at its admission (asked when ``late_binding`` is False)."""

    @abstractmethod
    def place(self, inv: Invocation, task: str, snap: MachineSnapshot) -> Mode | None:
        """The mode of ``inv``'s ``task``, ready now (asked when ``late_binding`` is True), or None
        to hold it: asked again when the machine changed; forced to the CPU when nothing runs."""

    def observe(self, done: TaskDone) -> None:  # noqa: B027 - an optional hook
        """A task ended (of any invocation): what it took, to learn from. Default: nothing."""

    def ended(self, inv: Invocation) -> None:  # noqa: B027 - an optional hook
        """``inv`` ended (ok, oom or error): forget what is kept of its tasks (those held or waiting
        to be placed included). Default: nothing."""


class PlanDecider(Decider):
    """A decider that plans each invocation's whole mapping at admission and admits every one."""

    late_binding = False

    def admit(self, inv: Invocation, snap: MachineSnapshot) -> bool:
        return True

    def place(self, inv: Invocation, task: str, snap: MachineSnapshot) -> Mode | None:
        return self.plan(inv, snap)[task]


class PlaceDecider(Decider):
    """A decider that places each task when it becomes ready; admits every invocation unless it says
    otherwise."""

    late_binding = True

    def admit(self, inv: Invocation, snap: MachineSnapshot) -> bool:
        return True

    def plan(self, inv: Invocation, snap: MachineSnapshot) -> Mapping[str, Mode]:
        raise TypeError(f"decider {self.name} places each task when it becomes ready: it plans no mapping")


class FasterDevice(PlanDecider):
    """Every task on its card's faster device (``gpu_now`` where the GPU is faster, else the CPU)."""

    name = "faster-device"

    def plan(self, inv: Invocation, snap: MachineSnapshot) -> Mapping[str, Mode]:
        return {
            t: (Mode.GPU_NOW if c.has_gpu and c.gpu_ms < c.cpu_ms else Mode.CPU)  # type: ignore[operator]
            for t, c in inv.cards.items()
        }


class StaticDecider(PlanDecider):
    """One fixed mapping per workflow name, applied to every invocation (FCFS, no admission)."""

    name = "static"

    def __init__(self, mappings: Mapping[str, Mapping[str, Mode]], name: str = "static") -> None:
        self.mappings = {k: dict(v) for k, v in mappings.items()}
        self.name = name

    def plan(self, inv: Invocation, snap: MachineSnapshot) -> Mapping[str, Mode]:
        return self.mappings[inv.workflow.name]
