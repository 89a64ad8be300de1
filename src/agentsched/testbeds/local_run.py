"""One run on the local testbed (``local.LocalBackend``): its leases of pooled tools, its worker
pools, its CUDA scope and clock, and the job each task runs on a worker thread.

A run with a mapping warms its tools before the clock (``warm``); a live-placed one (a ``Placer``,
late binding) takes each task's tool when the task starts, and tells the placer when a queued task
may take its turn (``gate``) and when each task really began (``run_started``).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.cuda_scope import CudaScope, NullStream, torch_threads_enter, torch_threads_exit
from agentsched.testbeds.daemon_pool import DaemonPool
from agentsched.testbeds.driver import Completion, Failure, Placer
from agentsched.testbeds.failures import is_oom
from agentsched.testbeds.real import base_and_k, call_tool, load_failure, load_reason, task_timeout
from agentsched.testbeds.tool_pool import Lease, VramWontFit

WAITING_RECHECK_S = 0.05  # with a timeout set, how often wait() looks again while a task waits for its start


@dataclass
class _Done:
    """What a task's job reports when it ends."""

    start_s: float  # perf_counter when the job began (queue: before loading)
    end_s: float  # perf_counter when its last call finished
    load_ms: float  # load paid first (gpu_queue), measured
    output: Any  # what the tool returned (its last call)


class LocalRun:
    """The per-run state of the local backend: leases of pooled tools, pools, CUDA scope, clock."""

    # backend: the local.LocalBackend that runs it (not imported here: local.py imports this module)
    def __init__(
        self, backend: Any, workflow: Workflow, mapping: Mapping[str, Mode], *, placer: Placer | None = None
    ) -> None:
        self.b = backend
        self.workflow = workflow
        # where each task really runs: a tool whose card has no GPU figure runs its host code
        # wherever it is placed (as the Dispatcher starts it), so it is loaded on the host; with a
        # placer (late binding) the mapping fills as tasks start
        self.mapping = mapping = effective_mapping(workflow.task_cards, mapping)
        self.placer = placer
        self.bases = {t: base_and_k(workflow, t) for t in workflow.task_ids}
        self.vram_mb = {t: workflow.task_cards[t].vram_needed_mb for t in workflow.task_ids}
        # each task's lease on a pooled instance: cpu tasks take theirs before the clock, GPU tasks
        # when they start; a started task's job gives it back (a timed-out one's is discarded)
        self.leases: dict[str, Lease] = {}
        self.started: set[str] = set()  # tasks whose job owns its lease
        self.paid: list[tuple[str, float]] = []  # (task, load_ms) of every lease taken by this run
        self.evicted: list[tuple[str, float]] = []  # (task, ms) unloading idle tools to make room for it
        self.uses_cuda = (
            any(c.has_gpu for c in workflow.task_cards.values())
            if placer is not None
            else any(m is not Mode.CPU for m in mapping.values())
        )
        self.stop = threading.Event()  # set when the execution fails: running tasks stop between calls
        self.running: dict[Future, str] = {}
        self.started_s: dict[Future, float] = {}  # perf_counter when each running task was submitted
        # perf_counter from which each task's timeout runs: when it took its CPU slot or its turn on
        # the GPU (inf while it waits for either: waiting is not running longer than its timeout)
        self.clock_s: dict[str, float] = {}
        self.opened = False  # the clock started (pools, CUDA scope, torch threads set)
        self.cuda: CudaScope | None = None
        self.prev_threads: int | None = None  # torch threads this run set (None: left as they were)
        self.cpu_pool: DaemonPool | None = None
        self.gpu_pool: DaemonPool | None = None
        self.t0 = 0.0

    def warm(self) -> Failure | None:
        """Before the clock: a loaded instance for every cpu task (held for the run), and gpu_now
        tools loaded onto the GPU where they fit beside what is resident (kept idle in the pool)."""
        b, gpu, budget = self.b, self.b.device, self.workflow.vram_budget_mb
        if self.uses_cuda:  # what runs without a budget may have left more resident than this one allows
            b.pool.fit_within(b.pool.budget_mb if b.pool.budget_mb is not None else budget)
        for t in self.workflow.task_ids:
            base = self.bases[t][0]
            try:
                if self.mapping[t] is Mode.CPU:
                    lease = b.acquire(base, "cpu")
                    assert lease is not None
                    self.leases[t] = lease
                    self.paid.append((t, lease.load_ms))
                elif self.mapping[t] is Mode.GPU_NOW:
                    with contextlib.suppress(VramWontFit):  # (its start fails as oom, in the run)
                        pre = b.acquire(base, gpu, vram_mb=self.vram_mb[t], budget_mb=budget, wait=False, evict=False)
                        if pre is not None:  # (its use is counted when the task starts)
                            if not pre.hit:
                                self.paid.append((t, pre.load_ms))
                            b.pool.release(pre)
            except TestbedError:
                self._release_unstarted()
                raise
            except Exception as exc:  # noqa: BLE001 - a tool that cannot load fails the execution
                self._release_unstarted()
                return load_failure(self.workflow, t, is_oom(exc), load_reason(exc))
        return None

    def _release_unstarted(self) -> None:
        for t in list(self.leases):
            if t not in self.started:
                self.b.pool.release(self.leases.pop(t))

    def open(self) -> None:
        """Set torch threads, pools and the CUDA scope; start the clock."""
        b = self.b
        if b.torch_threads is not None:
            self.prev_threads = b.torch_threads
            torch_threads_enter(b.torch_threads)
        self.opened = True
        if self.uses_cuda and b._real_cuda():
            budget = b.pool.budget_mb if b.pool.budget_mb is not None else self.workflow.vram_budget_mb
            self.cuda = CudaScope(b.device, budget if b.memory_ceiling else None)
        self.cpu_pool = DaemonPool(b.cpu_workers, "agentsched-cpu")
        gpu_tasks = (
            sum(c.has_gpu for c in self.workflow.task_cards.values())
            if self.placer is not None
            else sum(m is not Mode.CPU for m in self.mapping.values())
        )
        self.gpu_pool = DaemonPool(max(1, gpu_tasks), "agentsched-gpu")
        if self.cuda:
            self.cuda.enter()
        self.t0 = time.perf_counter()

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def _job(self, task: str, inputs: Mapping[str, Any]) -> _Done:
        mode, k, cuda = self.mapping[task], self.bases[task][1], self.cuda
        lease = self.leases.get(task)
        done: _Done | None = None
        self.clock_s[task] = math.inf  # no timeout while it waits for its turn or a CPU slot
        try:
            if self.placer is not None:  # live placement: a queued task waits for its turn here
                self.placer.gate(task, self.stop)
            with cuda.stream() if cuda and mode is not Mode.CPU else NullStream() as stream:
                if mode is not Mode.CPU:  # a GPU task: its instance now (warm hit, else loaded; may wait for VRAM)
                    self.clock_s[task] = time.perf_counter()
                    lease = self._lease(task, self.b.device)
                    stream.sync(lease.tool)
                    start = time.perf_counter() - lease.load_ms / 1000  # (after any wait for VRAM)
                    load_ms = lease.load_ms
                    self._began(task)
                    output = call_tool(lease.tool, inputs, k, sync=stream.sync, stop=self.stop)
                else:
                    loading_s = 0.0
                    if lease is None:  # late binding: nothing was warmed before the clock; its load is timed
                        self.clock_s[task] = time.perf_counter()
                        lease = self._lease(task, "cpu")
                        loading_s = time.perf_counter() - self.clock_s[task]
                        self.clock_s[task] = math.inf
                    with self.b.pool.cpu_slot(self.stop):  # the process's CPU slots (a service's)
                        start, load_ms = time.perf_counter(), 0.0
                        self.clock_s[task] = start - loading_s
                        self._began(task)
                        output = call_tool(lease.tool, inputs, k, sync=stream.sync, stop=self.stop)
                done = _Done(start, time.perf_counter(), load_ms, output)
        finally:
            if lease is not None:
                self.b.pool.release(lease)  # kept loaded for the next use (unloaded if discarded)
            if self.placer is not None:  # the machine's books: from the job itself, abandoned ones too
                if done is not None:
                    self.placer.finished(task, (done.end_s - done.start_s) * 1000.0 - done.load_ms, done.load_ms)
                else:
                    self.placer.released(task)
        return done

    def _lease(self, task: str, device: str) -> Lease:
        """``task``'s tool instance from the pool, taken when it starts (and paid, when not warm)."""
        gpu = device != "cpu"
        # with live placement the machine's budget, not the workflow's (one GPU, one budget)
        budget = self.workflow.vram_budget_mb if self.placer is None else self.placer.vram_budget_mb
        lease = self.b.acquire(
            self.bases[task][0],
            device,
            vram_mb=self.vram_mb[task] if gpu else 0.0,
            budget_mb=budget if gpu else None,
            stop=self.stop,
        )
        assert lease is not None
        self.leases[task] = lease
        self.paid.append((task, lease.load_ms))
        if lease.evict_ms:
            self.evicted.append((task, lease.evict_ms))
        return lease

    def _began(self, task: str) -> None:
        if self.placer is not None:
            self.placer.run_started(task)

    def submit(self, start: Start, inputs: Mapping[str, Any]) -> None:
        self.mapping[start.task] = start.mode  # where it really runs (late binding: known only now)
        pool = self.cpu_pool if start.mode is Mode.CPU else self.gpu_pool
        assert pool is not None
        self.started.add(start.task)
        self.clock_s[start.task] = now = time.perf_counter()  # (before the job starts: it sets its own)
        fut = pool.submit(self._job, start.task, inputs)
        self.running[fut] = start.task
        self.started_s[fut] = now

    def wait(self, up_to_s: float | None = None) -> list[Completion]:
        """The tasks that ended (at least one); with ``up_to_s``, [] when none ended by then; a task
        past its timeout (counted from ``clock_s``) ends as a timeout."""
        timeout = self.b.task_timeout_s
        until = None if up_to_s is None else time.perf_counter() + up_to_s
        while True:
            first, oldest = min(
                ((self.clock_s.get(t, self.started_s[f]), f) for f, t in self.running.items()), key=lambda x: x[0]
            )
            now = time.perf_counter()
            if timeout is not None and now >= first + timeout:  # the longest-running task ran over its timeout
                return [self._timed_out(oldest)]
            if until is not None and now >= until:
                return []
            limits = [] if until is None else [until - now]
            if timeout is not None:  # its deadline, or a look again soon while a task waits (no deadline yet)
                limits.append(first + timeout - now if math.isfinite(first) else WAITING_RECHECK_S)
                if any(math.isinf(self.clock_s.get(t, 0.0)) for t in self.running.values()):
                    limits.append(WAITING_RECHECK_S)
            done, _ = wait(list(self.running), timeout=min(limits) if limits else None, return_when=FIRST_COMPLETED)
            if done:
                break
        failed: list[Completion] = []
        finished: list[tuple[str, _Done]] = []
        now = self.now_ms()
        for fut in done:
            task = self.running.pop(fut)
            self.started_s.pop(fut, None)
            exc = fut.exception()
            if exc is None:
                finished.append((task, fut.result()))
            else:
                failed.append(Completion(task, now, now, error=exc))
        ms = self._ms
        return failed + [
            Completion(t, ms(d.start_s), ms(d.end_s), d.load_ms, d.output)
            for t, d in sorted(finished, key=lambda x: x[1].end_s)
        ]

    def _ms(self, at: float) -> float:
        return (at - self.t0) * 1000

    def _timed_out(self, fut: Future) -> Completion:
        """A task over its timeout: abandoned (its thread cannot be stopped), its tool instance dropped
        and never unloaded while it may still run; the next run builds and loads a new one."""
        task, started = self._abandon(fut)
        return Completion(task, self._ms(started), self.now_ms(), error=task_timeout(self.b.task_timeout_s or 0))

    def _abandon(self, fut: Future) -> tuple[str, float]:
        """Give up on a running task: its instance is dropped (never unloaded while it may run).
        Its task and when it started (s: from its slot or turn)."""
        task = self.running.pop(fut)
        started = self.started_s.pop(fut, self.t0)
        began = self.clock_s.get(task, math.inf)
        lease = self.leases.get(task)
        if lease is not None:  # (a GPU task still waiting for VRAM has none: it stops on its own)
            self.b.pool.discard(lease)
        return task, began if math.isfinite(began) else started

    def stop_all(self, wait_for: bool = True) -> None:
        """Let running tasks stop (between calls) before their models are released; with a task
        timeout, at most that long (a task still running then is abandoned, its instance dropped;
        without ``wait_for``, at once)."""
        self.stop.set()
        _, late = wait(list(self.running), timeout=self.b.task_timeout_s if wait_for else 0)
        for fut in late:
            self._abandon(fut)
        self.running.clear()

    def close(self) -> dict[str, Any]:
        """Stop what runs, shut the pools, restore CUDA and torch threads, give back the leases of
        tasks that never started; the run's details for ``Execution.extra``."""
        b = self.b
        if not self.opened:  # failed before the clock started
            self._release_unstarted()
            return {"size": b.size}
        measured = None
        try:
            self.stop_all()
            assert self.cpu_pool is not None and self.gpu_pool is not None
            self.cpu_pool.shutdown()
            self.gpu_pool.shutdown()
            measured = self.cuda.exit() if self.cuda else None
        finally:
            if self.prev_threads is not None:
                torch_threads_exit()
            self._release_unstarted()
        paid = list(self.paid)
        extra: dict[str, Any] = {
            "size": b.size,
            "cpu_workers": b.cpu_workers,
            # the pool: uses served warm, and the loads this run paid (before the clock too)
            "tool_hits": sum(1 for _, ms in paid if ms == 0.0),
            "tool_loads": {t: round(ms, 3) for t, ms in paid if ms > 0.0},
        }
        if self.evicted:  # idle tools unloaded to make room in VRAM for a task (ms, before it started)
            extra["tool_evictions_ms"] = {t: round(ms, 3) for t, ms in self.evicted}
        if self.uses_cuda:  # (fake GPU tools in tests have no measured peak)
            extra.update(device=b.device, gpu_now="pooled")
            if measured is not None:
                extra["measured_peak_vram_mb"] = round(measured, 3)
        return extra
