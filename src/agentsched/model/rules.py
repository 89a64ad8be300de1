"""The start rules: when may a task start? One piece of code shared by every testbed.

The simulated testbed and the local (real) testbed both drive a ``Dispatcher``: they report
finishes, ask ``poll()`` which tasks start now, and start exactly those. So both obey the same
semantics:

* a task is ready when all its predecessors finished; ready tasks are served in ready order
  (ties: workflow file order);
* ``cpu``: starts when ready (at most ``cpu_slots`` at once when a cap is set);
* ``gpu_now``: starts when ready and holds its VRAM until it ends; if starting it would exceed
  the VRAM budget the execution is infeasible (``oom``), as in the paper;
* ``gpu_queue``: a strict FIFO queue that runs one task at a time; the head is admitted when the
  queue is idle and its VRAM fits beside what is held, then pays its load time before running.
  A queued task holds no VRAM while waiting. A head larger than the whole budget is ``oom``.
* a tool without a GPU implementation placed on ``gpu_now`` or ``gpu_queue`` runs its host code as a
  ``cpu`` task (same latency, a CPU slot, no VRAM, no load, not through the queue), so both
  placements are the same run; ``Start.mode`` says where a task really runs.
* late binding (``Dispatcher.late``): a ready task has no mode until ``bind`` gives it one (a
  load-aware placer decides it then, from the machine's live state); until then it is ``unbound``
  and does not start.

Within one instant: finishes first, then cpu/gpu_now starts in ready order, then queue admission.

A machine shared by many invocations (the stream simulator, the local machine's live state, the
LangGraph gate) keeps its books in one ``Ledger`` (VRAM held, CPU slots busy, the GPU queue's
turn) and asks it the same rules; it adds one rule of its own choosing: with ``gpu_now_waits`` a
``gpu_now`` start that fits beside its own invocation's VRAM but not beside the others' waits for
VRAM (``Verdict.WAIT``) instead of ending as ``oom``. A ``Dispatcher`` is the ledger of one run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow, effective_mapping, effective_mode, fits_vram


@dataclass(frozen=True, slots=True)
class Start:
    """A task that starts now."""

    task: str
    mode: Mode  # where it runs (cpu for a host-only tool placed on the GPU)
    vram_mb: float  # VRAM it holds from now until it ends
    load_ms: float  # load-in it pays first (gpu_queue only)


@dataclass(frozen=True, slots=True)
class Infeasible:
    """A start that cannot happen: the execution ends as oom."""

    task: str
    needed_mb: float  # VRAM in use plus what the task needs
    budget_mb: float
    message: str
    # the tasks holding VRAM when the start failed, those admitted earlier in the same instant
    # included (they never start, so no timeline shows them: a learner needs this to know who)
    held_by: tuple[str, ...] = ()


class Verdict(Enum):
    """What the start rules say of a task that asks to start now."""

    START = "start"
    WAIT = "wait"  # for a CPU slot, the queue's turn, or (``gpu_now_waits``) VRAM others hold
    OOM = "oom"  # the start can never happen: its invocation ends as oom


class _Own(Enum):
    OWN = "the ledger's own budget"


OWN = _Own.OWN


class Ledger:
    """The books of one machine: the VRAM held, the CPU slots busy, the GPU queue's turn; and the
    start rules asked of them (module docstring). Not thread-safe: callers serialise calls."""

    def __init__(self, vram_budget_mb: float | None, cpu_slots: int | None) -> None:
        self.vram_budget_mb = vram_budget_mb  # None: no budget
        self.cpu_slots = cpu_slots  # None: unbounded
        self.vram_in_use_mb = 0.0
        self.cpu_busy = 0
        self.queue_busy = False  # a queued task is admitted (loading or running)

    def fits(self, vram_mb: float, *, budget_mb: float | None | _Own = OWN) -> bool:
        """Does ``vram_mb`` more fit beside what is held now (under ``budget_mb``: a machine whose
        callers each bring their run's budget; default the ledger's)?"""
        return fits_vram(self.vram_in_use_mb, vram_mb, self.vram_budget_mb if budget_mb is OWN else budget_mb)

    def cpu(self) -> Verdict:
        """A CPU task: a slot free, or wait (FIFO) for one."""
        return Verdict.START if self.cpu_slots is None or self.cpu_busy < self.cpu_slots else Verdict.WAIT

    def gpu_now(self, vram_mb: float, *, own_mb: float | None = None, behind: bool = False) -> Verdict:
        """A ``gpu_now`` task: starts when its VRAM fits (and no ``gpu_now`` task waits before it,
        ``behind``); else, where the machine lets it wait (``own_mb``: VRAM its own invocation holds;
        None: no waiting, one run's rule), it waits when it would fit beside its own invocation's
        VRAM alone; otherwise ``oom``."""
        if not behind and self.fits(vram_mb):
            return Verdict.START
        if own_mb is not None and fits_vram(own_mb, vram_mb, self.vram_budget_mb):
            return Verdict.WAIT
        return Verdict.OOM

    def queue_head(self, vram_mb: float, *, budget_mb: float | None | _Own = OWN) -> Verdict:
        """The GPU queue's head: admitted when the queue is idle and its VRAM fits beside what is
        held; a head larger than the whole budget is ``oom``. (``budget_mb``: as for ``fits``.)"""
        budget = self.vram_budget_mb if budget_mb is OWN else budget_mb
        if self.queue_busy:
            return Verdict.WAIT
        if not fits_vram(0.0, vram_mb, budget):  # type: ignore[arg-type]
            return Verdict.OOM
        return Verdict.START if fits_vram(self.vram_in_use_mb, vram_mb, budget) else Verdict.WAIT  # type: ignore[arg-type]

    def hold(self, mode: Mode, vram_mb: float) -> None:
        """A task starts on ``mode`` (where it really runs) holding ``vram_mb``."""
        self.vram_in_use_mb += vram_mb
        if mode is Mode.CPU:
            self.cpu_busy += 1
        elif mode is Mode.GPU_QUEUE:
            self.queue_busy = True

    def release(self, mode: Mode, vram_mb: float) -> None:
        """A task that ``hold`` counted ended (or was stopped)."""
        self.vram_in_use_mb -= vram_mb
        if self.vram_in_use_mb < 1e-9:  # float residue of the sums
            self.vram_in_use_mb = 0.0
        if mode is Mode.CPU:
            self.cpu_busy -= 1
        elif mode is Mode.GPU_QUEUE:
            self.queue_busy = False


class Dispatcher:
    """Admission state of one execution. Not thread-safe: callers serialise calls."""

    def __init__(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        cards: Mapping[str, ToolCard] | None = None,
        *,
        vram_budget_mb: float | None = None,
        cpu_slots: int | None = None,
    ) -> None:
        cards = cards if cards is not None else workflow.task_cards
        # where each task really runs: a GPU placement of a host-only tool is a CPU task
        real = effective_mapping(cards, mapping)
        self._setup(
            real,
            {t: c.vram_needed_mb for t, c in cards.items()},
            {t: c.load_needed_ms for t, c in cards.items()},
            vram_budget_mb if vram_budget_mb is not None else workflow.vram_budget_mb,
            cpu_slots,
        )
        self._succs = workflow.succs
        self._order = workflow.task_index
        self._waiting_preds = {t: len(p) for t, p in workflow.preds.items()}
        self._mark_ready([t for t in workflow.task_ids if self._waiting_preds[t] == 0])

    @classmethod
    def late(
        cls,
        workflow: Workflow,
        cards: Mapping[str, ToolCard] | None = None,
        *,
        vram_budget_mb: float | None = None,
        cpu_slots: int | None = None,
    ) -> Dispatcher:
        """The same rules with no mapping yet: each ready task waits in ``unbound`` (ready order)
        until ``bind`` places it. ``vram_budget_mb`` is the machine's, whoever placed the task
        (None: none), not the workflow's: a machine shared by many workflows has one budget."""
        d = cls.__new__(cls)
        d._cards = cards if cards is not None else workflow.task_cards
        d._setup({}, {}, {}, vram_budget_mb, cpu_slots)
        d._tasks = len(workflow.tasks)
        d._succs = workflow.succs
        d._order = workflow.task_index
        d._waiting_preds = {t: len(p) for t, p in workflow.preds.items()}
        d._mark_ready([t for t in workflow.task_ids if d._waiting_preds[t] == 0])
        return d

    def bind(self, task: str, mode: Mode) -> Mode:
        """Place an ``unbound`` ready task (late binding); returns where it really runs (a host-only
        tool on a GPU mode: cpu)."""
        if task not in self.unbound:
            raise RuntimeError(f"bind({task!r}) but it is not ready and unbound")
        self.unbound.remove(task)
        card = self._cards[task]
        real = effective_mode(card, mode)
        self.mapping[task] = real
        self._vram[task] = card.vram_needed_mb if real is not Mode.CPU else 0.0
        self._load[task] = card.load_needed_ms if real is Mode.GPU_QUEUE else 0.0
        (self.queue if real is Mode.GPU_QUEUE else self.ready).append(task)
        return real

    @classmethod
    def by_arrival(
        cls,
        mapping: Mapping[str, Mode],
        vram_mb: Mapping[str, float],
        *,
        budget_mb: float | None,
        cpu_slots: int | None,
    ) -> Dispatcher:
        """The same rules for a caller that decides itself when a task is ready (LangGraph calls a
        node when its graph step comes): no task is ready until ``arrive``; ready order is arrival
        order; a task may arrive again after it finished. ``mapping`` says where each task really
        runs (host-only tools already resolved to ``cpu``); no load is predicted."""
        d = cls.__new__(cls)
        d._setup(dict(mapping), vram_mb, {}, budget_mb, cpu_slots)
        d._succs = {t: () for t in mapping}
        d._order = None
        return d

    def _setup(
        self,
        mapping: dict[str, Mode],
        vram_mb: Mapping[str, float],
        load_ms: Mapping[str, float],
        budget_mb: float | None,
        cpu_slots: int | None,
    ) -> None:
        self.mapping = mapping
        self._tasks = len(mapping)
        self.budget_mb = budget_mb
        self.cpu_slots = cpu_slots
        self._vram = {t: (vram_mb.get(t, 0.0) if m is not Mode.CPU else 0.0) for t, m in mapping.items()}
        self._load = {t: (load_ms.get(t, 0.0) if m is Mode.GPU_QUEUE else 0.0) for t, m in mapping.items()}
        # Invariant: a task is in exactly one of {pending, ready, queue, running, done}.
        self.ready: list[str] = []  # cpu/gpu_now tasks ready but not started (ready order)
        self.unbound: list[str] = []  # late binding: tasks ready with no mode yet (ready order)
        self.queue: deque[str] = deque()  # gpu_queue tasks ready, FIFO
        self.running: set[str] = set()
        self.done: set[str] = set()
        self.queue_busy: str | None = None  # the one queued task admitted (loading or running)
        self.ledger = Ledger(budget_mb, cpu_slots)

    @property
    def vram_in_use_mb(self) -> float:
        return self.ledger.vram_in_use_mb

    @property
    def cpu_running(self) -> int:
        return self.ledger.cpu_busy

    def _mark_ready(self, tasks: list[str]) -> list[str]:
        if self._order is not None:  # (by arrival: in the order given)
            tasks = sorted(tasks, key=self._order.__getitem__)
        for t in tasks:
            mode = self.mapping.get(t)
            (self.unbound if mode is None else self.queue if mode is Mode.GPU_QUEUE else self.ready).append(t)
        return tasks

    def arrive(self, task: str) -> None:
        """``task`` is ready now (``by_arrival`` only; a finished task may arrive again)."""
        self.done.discard(task)
        self._mark_ready([task])

    def withdraw(self, task: str) -> None:
        """Take a ready ``task`` back (a start the rules refused: the caller fails it alone)."""
        if task in self.ready:
            self.ready.remove(task)
        elif task in self.queue:
            self.queue.remove(task)

    @property
    def finished(self) -> bool:
        return len(self.done) == self._tasks

    def vram_of(self, task: str) -> float:
        return self._vram[task]

    def finish(self, task: str) -> list[str]:
        """Record that ``task`` ended; release its resources; return the tasks that became ready."""
        if task not in self.running:
            raise RuntimeError(f"finish({task!r}) but it is not running")
        self.running.discard(task)
        self.done.add(task)
        mode = self.mapping[task]
        self.ledger.release(mode, self._vram[task])
        if mode is Mode.GPU_QUEUE:
            self.queue_busy = None
        newly = []
        for s in self._succs[task]:
            self._waiting_preds[s] -= 1
            if self._waiting_preds[s] == 0:
                newly.append(s)
        return self._mark_ready(newly)

    def _holders(self) -> tuple[str, ...]:
        """The running tasks that hold VRAM, in workflow order."""
        held = [u for u in self.running if self._vram[u] > 0]
        return tuple(sorted(held, key=self._order.__getitem__) if self._order is not None else sorted(held))

    def poll(self) -> list[Start] | Infeasible:
        """The tasks that start now (possibly none), or the start that makes the run infeasible.

        An ``Infeasible`` answer ends the execution: tasks this same poll had already admitted
        before the failing one are counted as running but not returned (they never start); the
        failing task stays ready (``withdraw`` takes it back).
        """
        starts: list[Start] = []
        still: list[str] = []
        ledger = self.ledger
        for i, t in enumerate(self.ready):
            mode = self.mapping[t]
            need = self._vram[t]
            if mode is Mode.CPU:
                if ledger.cpu() is Verdict.WAIT:
                    still.append(t)
                    continue
            elif ledger.gpu_now(need) is Verdict.OOM:
                assert self.budget_mb is not None
                held = self.vram_in_use_mb
                total = held + need
                self.ready = still + self.ready[i:]
                return Infeasible(
                    t,
                    total,
                    self.budget_mb,
                    f"gpu_now task {t} needs {need:g} MB with {held:g} MB held: "
                    f"{total:g} > budget {self.budget_mb:g} MB",
                    self._holders(),
                )
            ledger.hold(mode, need)
            self.running.add(t)
            starts.append(Start(t, mode, need, 0.0))
        self.ready = still
        if self.queue:
            head = self.queue[0]
            need = self._vram[head]
            verdict = ledger.queue_head(need)
            if verdict is Verdict.OOM:
                return Infeasible(
                    head,
                    need,
                    self.budget_mb,  # type: ignore[arg-type]
                    f"gpu_queue task {head} needs {need:g} MB, more than the whole budget {self.budget_mb:g} MB",
                )
            if verdict is Verdict.START:
                self.queue.popleft()
                self.queue_busy = head
                ledger.hold(Mode.GPU_QUEUE, need)
                self.running.add(head)
                starts.append(Start(head, Mode.GPU_QUEUE, need, self._load[head]))
        return starts
