"""What concurrent invocations of one graph share: its tools, the CPU slots, the GPU queue, the VRAM.

A served graph is invoked by many requests at once (``GraphRuntime.invoke`` from several threads:
a round's invocations run together, runtime/dispatch.py). Each invocation has its own start rules
(``gate.Gate``: its ``gpu_now`` nodes over the budget are its own ``oom``, as in the paper); what
they share is this testbed's machine, and a placeable node takes its part of it after its own gate
lets it start:

* **its tool**: one instance per node, kept warm across invocations; one run at a time, unless the
  tool's class says ``concurrent_safe`` and its placement does not move it (``cpu``, a resident
  ``gpu_now``). A second invocation at the same node waits for the first (a pipeline);
* **a CPU slot** (``cpu`` nodes): ``cpu_slots`` for every invocation together, first come first
  served, as the local testbed's process slots (``ToolPool.cpu_slot``);
* **the GPU queue** (``gpu_queue`` nodes): one FIFO for every invocation, one node at a time,
  admitted when its VRAM fits beside what the other invocations hold;
* **VRAM** under a budget (``gpu_now`` nodes staged on the host, moved to the GPU while they run):
  a node waits until its VRAM fits beside the other invocations' under its run's budget (never an
  oom between them: each invocation's own gate has checked it fits alone).

The tools' placement is the mapping's (each task's mode and where its tool waits): runs under one
placement overlap; a run under another (a probe, a pinned mapping) waits until they are done, then
the tools move (``placement``).

One machine per testbed (per graph), but the GPU and the host are the process's: every machine on
one device (``device``, e.g. ``cuda:0``) shares that device's GPU queue and VRAM ledger
(``_Device``), so two graphs served by one process never hold more than a run's budget between them,
and their queued nodes take turns. A ``cpu`` node holds one of its graph's slots (its
``cpu_workers``) and one of the host's (``_Host``), shared by every graph of the process: as many as
the CPU count, or the most any graph asks for (a graph whose CPU tools wait on I/O may ask for more
than the cores). Why: with slots per graph alone, two graphs with the default slots (the CPU count
each) would run twice as many CPU nodes as the host has cores.

Deadlock-free: a node takes its tool first and then one device resource, and everything it may wait
for is held by a node that is running its tool, which needs nothing more to finish.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, nullcontext

from agentsched.errors import TestbedError
from agentsched.model.rules import Ledger, Verdict
from agentsched.model.workflow import Mode


class _Device:
    """What every machine on one GPU device shares: the lock (one condition, so a node waiting for
    VRAM wakes when another graph's node frees it), the GPU queue and the VRAM held."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # the VRAM held and the GPU queue's turn, by the start rules (each node brings its run's budget)
        self.ledger = Ledger(None, None)
        self.tickets = itertools.count()
        self.queue_line: deque[int] = deque()  # FIFO of the GPU queue, every graph's nodes together


class _Host:
    """The CPU slots every graph of the process shares (module docstring), served first come first
    served. Its own lock: graphs on different devices share it."""

    def __init__(self, cpu_count: int | None = None) -> None:
        self.cond = threading.Condition()
        self.slots = max(1, cpu_count if cpu_count is not None else (os.cpu_count() or 1))
        self.busy = 0
        self.tickets = itertools.count()
        self.line: deque[int] = deque()

    def ask(self, slots: int) -> None:
        """A graph asks for ``slots``: the host's slots grow to it (never shrink)."""
        with self.cond:
            self.slots = max(self.slots, slots)
            self.cond.notify_all()

    @contextmanager
    def slot(self, stop: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Hold one of the host's slots while the block runs (waiting for it first, in line; a
        ``TestbedError`` once ``stop()`` while it waits)."""
        with self.cond:
            _wait_in_line(self.cond, self.line, next(self.tickets), lambda: self.busy < self.slots, stop)
            self.busy += 1
        try:
            yield
        finally:
            with self.cond:
                self.busy -= 1
                self.cond.notify_all()


def _wait_in_line(
    cond: threading.Condition,
    line: deque[int],
    ticket: int,
    free: Callable[[], bool],
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Wait (``cond`` held) until ``ticket`` heads ``line`` and ``free()``; then leave the line.
    ``stop()`` while it waits: leave the line and raise the closed machine's ``TestbedError``."""
    line.append(ticket)
    try:
        cond.wait_for(lambda: stop() or (line[0] == ticket and free()))
        if stop():
            raise _closed()
    except BaseException:  # interrupted: a ticket left in the line would stop every later one
        line.remove(ticket)
        cond.notify_all()
        raise
    line.popleft()
    cond.notify_all()  # the next in line may be free too (another slot)


def _closed() -> TestbedError:
    return TestbedError("the LangGraph testbed is closed: no node call starts any more")


_HOST = _Host()  # the process's host
_DEVICES: dict[str, _Device] = {}  # device name -> its shared part, for the life of the process
_DEVICES_LOCK = threading.Lock()


def _device(name: str) -> _Device:
    with _DEVICES_LOCK:
        return _DEVICES.setdefault(name, _Device())


class GraphMachine:
    """The shared part of the testbed (module docstring). Thread-safe."""

    def __init__(self, cpu_slots: int, device: str = "cuda:0", host: _Host | None = None) -> None:
        self.cpu_slots = cpu_slots
        self._host = host if host is not None else _HOST
        self._host.ask(cpu_slots)
        self._gpu = _device(device)
        self._cond = self._gpu.cond
        self._closed = False  # no run starts any more (``close``)
        self._placement: Hashable | None = None  # the tools' placement now (None: not placed yet)
        self._placing = False  # a run is moving the tools (``placement``; outside the lock)
        self._runs = 0  # runs in progress under it
        self._tools_busy: dict[str, int] = {}  # task -> runs of its tool in progress
        self._tools_alone: set[str] = set()  # tasks whose tool serves one run that may move it
        self._cpu_busy = 0
        self._cpu_line: deque[int] = deque()  # FIFO of the nodes waiting for one of this graph's CPU slots

    # ---- a run ---------------------------------------------------------------------------------
    @contextmanager
    def placement(self, key: Hashable, place: Callable[[], None]) -> Iterator[None]:
        """Hold the tools' placement ``key`` for one run. The first run under a new key waits for
        the runs under the old one to end and calls ``place`` (which moves the tools); a ``place``
        that raises leaves the placement unknown, so the next run places again."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or (not self._placing and (self._runs == 0 or self._placement == key))
            )
            if self._closed:
                raise TestbedError("the LangGraph testbed is closed: no invocation starts any more")
            moving = self._placement != key
            if moving:  # runs under any key wait until the tools are where this key puts them
                self._placement, self._placing = None, True
            else:
                self._runs += 1
        if moving:
            self._place(key, place)
        try:
            yield
        finally:
            with self._cond:
                self._runs -= 1
                self._cond.notify_all()

    def _place(self, key: Hashable, place: Callable[[], None]) -> None:
        """Move the tools (``place``) and count this run under ``key``. Why outside the lock: loading
        models takes seconds, and the lock is the device's: every other graph's nodes would wait."""
        placed = False
        try:
            place()
            placed = True
        finally:
            with self._cond:
                self._placing = False
                if placed:
                    self._placement = key
                    self._runs += 1
                self._cond.notify_all()  # runs under this key (or, after a failure, any) may go

    # ---- a node --------------------------------------------------------------------------------
    @contextmanager
    def node(
        self, task: str, mode: Mode, vram_mb: float, *, staged: bool, shared: bool, budget_mb: float | None = None
    ) -> Iterator[None]:
        """Hold what node ``task`` needs to run in ``mode``: its tool (``shared``: the tool may serve
        several runs at once), then a CPU slot, the GPU queue's turn, or its VRAM when ``staged``
        (fitting beside what every invocation on the device holds under ``budget_mb``, its run's budget)."""
        moves = mode is Mode.GPU_QUEUE or (mode is Mode.GPU_NOW and staged)  # loaded/moved for this run
        held_vram = vram_mb if moves else 0.0
        alone = moves or not shared  # a tool this run moves serves no other run meanwhile
        with self._cond:
            self._wait_open(lambda: task not in self._tools_alone and (not alone or not self._tools_busy.get(task)))
            self._tools_busy[task] = self._tools_busy.get(task, 0) + 1
            if alone:
                self._tools_alone.add(task)
            try:
                self._take_device(mode, held_vram, budget_mb)
            except BaseException:  # closed while it waited: the tool it took serves the others again
                self._give_back(task, None, 0.0)
                raise
        try:  # (the host's slot after the graph's, outside the device's lock: no lock is held while waiting)
            with self._host.slot(lambda: self._closed) if mode is Mode.CPU else nullcontext():
                yield
        finally:
            with self._cond:
                self._give_back(task, mode, held_vram)

    def _take_device(self, mode: Mode, held_vram: float, budget_mb: float | None) -> None:
        """Wait (lock held) for the node's CPU slot, GPU queue turn or VRAM, and take it."""
        gpu = self._gpu
        if mode is Mode.CPU:
            self._wait_turn(self._cpu_line, lambda: self._cpu_busy < self.cpu_slots)
            self._cpu_busy += 1
            return
        ledger = gpu.ledger
        if mode is Mode.GPU_QUEUE:
            # (a head over the whole budget never starts: its own gate refused it as oom already)
            self._wait_turn(gpu.queue_line, lambda: ledger.queue_head(held_vram, budget_mb=budget_mb) is Verdict.START)
        elif held_vram:
            self._wait_open(lambda: ledger.fits(held_vram, budget_mb=budget_mb))
        ledger.hold(mode, held_vram)

    def _give_back(self, task: str, mode: Mode | None, held_vram: float) -> None:
        """Release (lock held) the node's tool and what ``mode`` took (None: nothing on the device)."""
        self._tools_busy[task] -= 1
        self._tools_alone.discard(task)
        if mode is Mode.CPU:
            self._cpu_busy -= 1
        elif mode is not None:
            self._gpu.ledger.release(mode, held_vram)
        self._cond.notify_all()

    def _wait_open(self, ok: Callable[[], bool]) -> None:
        """Wait (lock held) until ``ok()``; a ``TestbedError`` once the machine is closed (``close``)."""
        self._cond.wait_for(lambda: self._closed or ok())
        if self._closed:
            raise _closed()

    def _wait_turn(self, line: deque[int], free: Callable[[], bool]) -> None:
        """Wait (lock held) until this node heads ``line`` and ``free()``; then leave the line. A
        ``TestbedError`` once the machine is closed."""
        _wait_in_line(self._cond, line, next(self._gpu.tickets), free, lambda: self._closed)

    def close(self, timeout_s: float) -> bool:
        """Start no run and no node any more (a node waiting for its start raises ``TestbedError``);
        wait up to ``timeout_s`` for the runs in progress to end. True when none runs any more (the
        tools may be unloaded)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with self._host.cond:  # a node waiting for one of the host's slots looks again
            self._host.cond.notify_all()
        with self._cond:
            return self._cond.wait_for(lambda: self._runs == 0 and not self._placing, timeout=timeout_s)

    @property
    def vram_held_mb(self) -> float:
        """VRAM the nodes running now hold on this machine's device (staged and queued ones, every
        graph's)."""
        return self._gpu.ledger.vram_in_use_mb
