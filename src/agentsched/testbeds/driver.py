"""One driver for every testbed; backends change only the clock and how tasks start and finish.

The shape is SimPy's ``core.Environment`` with ``rt.RealtimeEnvironment``: one event loop, and
the real-time variant overrides only how time passes. Here the ``Driver`` owns

* the start rules (``rules.Dispatcher``): after every batch of finishes it asks ``poll()`` which
  tasks start now and starts exactly those; an ``Infeasible`` answer ends the run as ``oom``;
* the data flow: a source task receives the invocation's ``inputs``; a task with predecessors
  receives ``{pred_task_id: pred_output}``; every finished task's output goes to
  ``Execution.outputs`` (backends that compute none, the simulator, record none);
* all timeline recording (ready/start/end/load per task, the VRAM step curve, the peak) and the
  ``Execution`` it returns, ``ok``, ``oom`` or ``error`` alike.

A ``Backend`` supplies only its clock (``now_ms``), how to start a task (``start``), how to wait
for the next completion(s) (``wait``), and setup/cleanup/abort of one run. The simulator
(``sim.SimBackend``) advances a discrete-event clock; the local backend (``local.LocalBackend``)
runs threads and CUDA streams against ``time.perf_counter``. A new testbed is one backend file
plus one registry line in ``factory.py``.

Late binding (``Driver.run_live``, backends with ``late_binding``): the run starts with no mapping;
each task gets its mode from a ``Placer`` when it becomes ready (``Dispatcher.late``), the placer
deciding over the whole process's live state (``live_machine.LiveMachine``). A task the placer
holds is asked again every ``HOLD_POLL_S`` until placed; the run's own finishes are applied meanwhile.
"""

from __future__ import annotations

import contextlib
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError, one_line
from agentsched.model.cards import ToolCard
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.rules import Dispatcher, Infeasible, Start
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.failures import is_oom

HOLD_POLL_S = 0.005  # late binding: how often a held task is asked about again (the machine moves meanwhile)


@dataclass(frozen=True, slots=True)
class Completion:
    """What a backend reports when a task ends (or fails)."""

    task: str  # task id
    start_ms: float  # when it really began on the run's clock (gpu_queue: before loading)
    end_ms: float  # when it ended (or failed)
    load_ms: float = 0.0  # load-in paid first (gpu_queue), on the run's clock
    output: Any = None  # what the task returned (None when the backend computes nothing)
    error: BaseException | None = None  # the exception the task raised; None when it finished


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a run ended early: before its clock started (a tool that cannot load, from ``begin``),
    or during it (a start the rules refuse, a task that raised)."""

    status: Status  # oom or error
    task: str  # the task that failed
    message: str  # one line
    needed_mb: float = 0.0  # VRAM in use plus what the failing start needed (oom; counts in the peak)
    held_by: tuple[str, ...] = ()  # the tasks holding VRAM when a start was refused (oom)
    machine_lost: bool = False  # the machine under the task failed (``MachineLost``): no placement's doing

    def extra(self) -> dict[str, Any]:
        """What an ``Execution`` of this failure says of it (``extra``): the task, or, when its machine
        was lost, a host failure no placement causes (``model/rounds.py``: nothing to judge)."""
        if self.machine_lost:
            return {"failed_node": "machine", "external": True, "lost_task": self.task}
        return {"failed_task": self.task, **({"held_by": list(self.held_by)} if self.held_by else {})}


class MachineLost(TestbedError):
    """The machine under a task failed, not the task: a cluster node or the whole cluster lost, its
    raylet dead. Its run fails as a host failure: no placement causes it, none is blamed for it."""


class Placer(ABC):
    """One invocation's late binding: where each task runs, decided when it becomes ready.

    The driver asks: ``admit`` -> ``place`` ... -> [``withdraw``, after a failure] -> ``end``
    (always). The backend reports each task's life from the task's own thread: ``gate`` when its
    job begins, ``run_started`` when its run really begins, then ``finished`` or ``released``
    when its job returns (a task abandoned over its timeout: when it really returns, after ``end``).
    """

    #: the VRAM budget of the machine the placer decides for (MB; None: none): the run's, whatever
    #: its workflow declares (one GPU shared by many workflows has one budget)
    vram_budget_mb: float | None = None

    @abstractmethod
    def admit(self) -> None:
        """Block until the invocation may start (admission at the door)."""

    @abstractmethod
    def place(self, task: str) -> Mode | None:
        """The mode of ready ``task``, or None to hold it (asked again later)."""

    @abstractmethod
    def wait_change(self, timeout_s: float) -> None:
        """Sleep until the machine changes (a task started or ended anywhere), at most ``timeout_s``."""

    def gate(self, task: str, stop: threading.Event) -> None:
        """``task``'s job begins; block until it may take its instance (a queued task: its turn in
        the machine's GPU queue). Raises ``Cancelled`` once ``stop`` is set."""

    @abstractmethod
    def run_started(self, task: str) -> None:
        """``task`` really began (a CPU slot taken, a GPU instance ready)."""

    @abstractmethod
    def finished(self, task: str, run_ms: float, load_ms: float) -> None:
        """``task``'s job returned its output: its run (load excluded) and load."""

    @abstractmethod
    def released(self, task: str) -> None:
        """``task``'s job returned without an output (it raised, or was cancelled)."""

    def withdraw(self) -> None:
        """The run failed: its tasks placed whose job never began are taken back at once."""

    @abstractmethod
    def end(self) -> None:
        """The invocation is over: what it still holds is released, but for tasks whose job is still
        running (abandoned over a timeout: ``finished`` or ``released`` releases them later)."""


class Backend(ABC):
    """How one kind of testbed starts tasks and lets time pass. One run at a time:
    ``begin`` -> (``start`` ... ``wait``)* -> [``abort``] -> ``end``; then the next run."""

    #: the testbed's name, recorded in every ``Execution.testbed``
    name: str = "backend"
    #: True when repeated runs of one mapping give one answer
    deterministic: bool = False
    #: True when tasks compute outputs (the driver then builds each task's inputs and keeps outputs)
    computes_outputs: bool = True
    #: True when a run may begin with no mapping, each task placed when ready (``begin_live``)
    late_binding: bool = False

    @property
    def cpu_slots(self) -> int | None:
        """At most this many CPU tasks at once (the Dispatcher's cap); None: unbounded."""
        return None

    def can_expect(self) -> bool:
        """True when ``begin(..., expected=True)`` gives the noise-free execution."""
        return False

    def preflight(self, workflow: Workflow) -> None:
        """One-line ``TestbedError`` when the workflow's placements cannot run here at all."""
        return None

    def begin_round(self, index: int) -> None:
        """The run loop starts round ``index`` (see ``Testbed.begin_round``); default: nothing."""
        return None

    def real_cards(self, workflow: Workflow) -> Mapping[str, ToolCard]:
        """The cards the start rules admit tasks by (default: the workflow's; the simulator's world may
        make a tool hold more VRAM than its card says)."""
        return workflow.task_cards

    @abstractmethod
    def begin(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None, expected: bool = False
    ) -> Failure | None:
        """Prepare one run and start its clock at 0; a ``Failure`` ends it before any task starts.
        ``expected``: run without noise (only asked when ``can_expect()``)."""

    def begin_live(self, workflow: Workflow, placer: Placer) -> Failure | None:
        """``begin`` for a run whose tasks are placed when ready (``late_binding`` backends);
        ``placer.run_started`` is called when each task really begins."""
        raise NotImplementedError(f"the {self.name} testbed places no task when it becomes ready")

    def wait_up_to(self, timeout_s: float) -> list[Completion]:
        """``wait``, returning [] after ``timeout_s`` with nothing ended (``late_binding`` backends)."""
        raise NotImplementedError(f"the {self.name} testbed places no task when it becomes ready")

    @abstractmethod
    def now_ms(self) -> float:
        """The run's clock, in ms since ``begin``."""

    @abstractmethod
    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        """Start ``start.task`` now (``start.mode`` says where it really runs; ``start.load_ms``
        is the load the cards predict for a queued task). ``inputs`` is None when the backend
        computes no outputs."""

    @abstractmethod
    def wait(self) -> list[Completion]:
        """Block (or advance the clock) until at least one started task ends; return every task
        that ended, in the order their finishes are to be applied."""

    def abort(self, wait: bool = True) -> dict[str, float]:
        """The run failed: stop the tasks still running (they end without a completion). Return
        the load each of them pays, where the backend knows it (task -> load_ms), for the record.
        ``wait`` False (a Ctrl-C or an exit: the process is ending): a task that cannot be stopped
        is abandoned at once instead of waited for."""
        return {}

    def end(self) -> dict[str, Any]:
        """Release what ``begin`` set up (also after a failure); return the testbed-specific
        details of the run for ``Execution.extra``."""
        return {}

    def close(self) -> None:
        """Release long-lived resources (loaded models)."""
        return None


def _infeasible(decision: Infeasible) -> Failure:
    return Failure(Status.OOM, decision.task, decision.message, decision.needed_mb, decision.held_by)


def _vram_point(timeline: list[tuple[float, float]], now: float, vram_mb: float) -> None:
    """Append (now, vram_mb) to a step curve: one point per instant, none when unchanged."""
    if timeline and timeline[-1][0] == now:
        timeline.pop()
    if not timeline or timeline[-1][1] != vram_mb:
        timeline.append((now, vram_mb))


class Driver(Testbed):
    """A testbed made of the shared event loop and one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend  # how tasks start and time passes
        self.name = backend.name
        self.deterministic = backend.deterministic

    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        return self._drive(workflow, mapping, rng, inputs, expected=False)

    def run_live(self, workflow: Workflow, placer: Placer, *, inputs: Mapping[str, Any] | None = None) -> Execution:
        """One run with no mapping: ``placer`` places each task when it becomes ready (module
        docstring); the execution's mapping is what it decided. Its clock starts before admission."""
        if not self.backend.late_binding:
            raise TestbedError(
                f"the {self.name} testbed cannot place tasks when they become ready "
                "(live placement runs on the local testbed and the real-time simulator)"
            )
        try:
            return self._drive(workflow, {}, None, inputs, expected=False, placer=placer)
        finally:
            placer.end()

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution | None:
        if not self.backend.can_expect():
            return None
        return self._drive(workflow, mapping, None, None, expected=True)

    def preflight(self, workflow: Workflow) -> None:
        self.backend.preflight(workflow)

    def begin_round(self, index: int) -> None:
        self.backend.begin_round(index)

    def close(self) -> None:
        self.backend.close()

    def _drive(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        rng: random.Random | None,
        inputs: Mapping[str, Any] | None,
        *,
        expected: bool,
        placer: Placer | None = None,
    ) -> Execution:
        backend = self.backend
        try:
            early = (
                backend.begin(workflow, mapping, rng=rng, expected=expected)
                if placer is None
                else backend.begin_live(workflow, placer)
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to report
                backend.end()
            raise
        if early is not None:
            extra = backend.end()
            return Execution(
                status=early.status,
                mapping=dict(mapping),
                e2e_ms=None,
                elapsed_ms=0.0,
                peak_vram_mb=0.0,
                spans=(),
                message=early.message,
                testbed=self.name,
                extra={**extra, **early.extra()},
            )
        rec = _Run(workflow, dict(mapping), backend.computes_outputs, inputs, backend.real_cards(workflow))
        try:
            failure = rec.loop(backend) if placer is None else rec.loop_live(backend, placer)
            fail_ms = backend.now_ms()
            if failure is not None:
                if placer is not None:
                    placer.withdraw()
                rec.loads.update(backend.abort())
        except BaseException as e:
            backend.abort(wait=isinstance(e, Exception))  # a Ctrl-C does not wait for a tool that will not stop
            backend.end()
            raise
        extra = backend.end()
        return rec.execution(self.name, failure, fail_ms, extra)


class _Run:
    """The bookkeeping of one run: the Dispatcher, the timeline, the outputs."""

    def __init__(
        self,
        workflow: Workflow,
        mapping: dict[str, Mode],
        keep_outputs: bool,
        inputs: Mapping[str, Any] | None,
        cards: Mapping[str, ToolCard] | None = None,
    ) -> None:
        self.workflow = workflow
        self.mapping = mapping
        self.cards = dict(cards) if cards is not None else workflow.task_cards  # what the start rules admit
        self.keep_outputs = keep_outputs  # build inputs and keep outputs (not on the simulator)
        self.inputs = dict(inputs or {})  # the invocation's arguments, given to source tasks
        self.ready_at: dict[str, float] = {t: 0.0 for t in workflow.task_ids if not workflow.preds[t]}
        self.starts_at: dict[str, float] = {}
        self.ends_at: dict[str, float] = {}
        self.loads: dict[str, float] = {}
        self.vram_of: dict[str, float] = {}
        self.order: list[str] = []  # tasks in start order
        self.outputs: dict[str, Any] = {}
        self.vram_timeline: list[tuple[float, float]] = [(0.0, 0.0)]  # step curve of VRAM in use
        self.peak = 0.0

    def task_inputs(self, task: str) -> Mapping[str, Any]:
        preds = self.workflow.preds[task]
        if not preds:
            return self.inputs
        return {p: self.outputs.get(p) for p in preds}

    def loop(self, backend: Backend) -> Failure | None:
        """Start, wait, finish until every task ended; the failure that ended it early, if any."""
        disp = Dispatcher(self.workflow, self.mapping, self.cards, cpu_slots=backend.cpu_slots)
        running: set[str] = set()
        while True:
            decision = disp.poll()
            if isinstance(decision, Infeasible):
                return _infeasible(decision)
            self._start(decision, disp, backend, running)
            if not running:
                return None
            failure = self._apply(backend.wait(), disp, running)
            if failure is not None:
                return failure

    def loop_live(self, backend: Backend, placer: Placer) -> Failure | None:
        """``loop`` with late binding: each ready task asks ``placer`` for its mode (held ones again
        every ``HOLD_POLL_S``, while the run's own finishes are applied)."""
        placer.admit()
        disp = Dispatcher.late(
            self.workflow, self.cards, vram_budget_mb=placer.vram_budget_mb, cpu_slots=backend.cpu_slots
        )
        running: set[str] = set()
        while True:
            held = False
            for t in list(disp.unbound):
                mode = placer.place(t)
                if mode is None:
                    held = True
                    continue
                self.mapping[t] = mode  # what was decided (disp.bind keeps where it really runs)
                disp.bind(t, mode)
            decision = disp.poll()
            if isinstance(decision, Infeasible):
                return _infeasible(decision)
            self._start(decision, disp, backend, running)
            if not running:
                if not held:
                    return None
                placer.wait_change(HOLD_POLL_S)
                continue
            done = backend.wait_up_to(HOLD_POLL_S) if held else backend.wait()
            failure = self._apply(done, disp, running)
            if failure is not None:
                return failure

    def _start(self, decision: list[Start], disp: Dispatcher, backend: Backend, running: set[str]) -> None:
        now = 0.0
        for st in decision:
            now = backend.now_ms()
            self.order.append(st.task)
            self.starts_at[st.task] = now
            self.vram_of[st.task] = st.vram_mb
            running.add(st.task)
            backend.start(st, self.task_inputs(st.task) if self.keep_outputs else None)
        if decision:
            _vram_point(self.vram_timeline, now, disp.vram_in_use_mb)
            self.peak = max(self.peak, disp.vram_in_use_mb)

    def _apply(self, done: list[Completion], disp: Dispatcher, running: set[str]) -> Failure | None:
        """Apply a batch of finishes; the failure among them, if any (judged before the finishes)."""
        failure = None
        for c in done:
            if c.error is not None and failure is None:
                failure = self._failed(c, disp.vram_in_use_mb)
        for c in done:
            running.discard(c.task)
            if c.error is not None:
                continue
            self.starts_at[c.task] = c.start_ms
            self.ends_at[c.task] = c.end_ms
            self.loads[c.task] = c.load_ms
            if self.keep_outputs:
                self.outputs[c.task] = c.output
            for nt in disp.finish(c.task):
                self.ready_at[nt] = c.end_ms
            _vram_point(self.vram_timeline, c.end_ms, disp.vram_in_use_mb)
        return failure

    def _failed(self, c: Completion, vram_in_use_mb: float) -> Failure:
        name = self.cards[c.task].name
        assert c.error is not None
        if isinstance(c.error, MemoryError) and is_oom(c.error):  # a VRAM budget refused it (no CUDA error)
            return Failure(
                Status.OOM, c.task, f"task {c.task} ({name}): {str(c.error).splitlines()[0]}", vram_in_use_mb
            )
        if is_oom(c.error):
            return Failure(
                Status.OOM, c.task, f"task {c.task} ({name}): CUDA out of memory: {one_line(c.error)}", vram_in_use_mb
            )
        if isinstance(c.error, MachineLost):
            return Failure(
                Status.ERROR, c.task, f"task {c.task} ({name}) lost its machine: {c.error}", machine_lost=True
            )
        return Failure(Status.ERROR, c.task, f"task {c.task} ({name}) failed: {one_line(c.error)}")

    def execution(self, testbed: str, failure: Failure | None, fail_ms: float, extra: dict[str, Any]) -> Execution:
        cards = self.cards
        # in workflow order (late binding fills it in placement order; a failed one may lack tasks)
        mapping = {t: self.mapping[t] for t in self.workflow.task_ids if t in self.mapping}
        spans = tuple(
            TaskSpan(
                task=t,
                tool=cards[t].name,
                mode=mapping[t],
                ready_ms=self.ready_at.get(t, self.starts_at[t]),
                start_ms=self.starts_at[t],
                end_ms=self.ends_at.get(t),
                load_ms=self.loads.get(t, 0.0),
                vram_mb=self.vram_of.get(t, 0.0),
            )
            for t in self.order
        )
        if failure is not None:
            return Execution(
                status=failure.status,
                mapping=dict(mapping),
                e2e_ms=None,
                elapsed_ms=fail_ms,
                peak_vram_mb=max(self.peak, failure.needed_mb),
                spans=spans,
                vram_timeline=tuple(self.vram_timeline),
                message=failure.message,
                testbed=testbed,
                extra={**extra, **failure.extra()},
                outputs=self.outputs,
            )
        e2e = max(self.ends_at[t] for t in self.workflow.sinks)
        return Execution(
            status=Status.OK,
            mapping=dict(mapping),
            e2e_ms=e2e,
            elapsed_ms=e2e,
            peak_vram_mb=self.peak,
            spans=spans,
            vram_timeline=tuple(self.vram_timeline),
            testbed=testbed,
            extra=extra,
            outputs=self.outputs,
        )
