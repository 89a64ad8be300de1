"""The local testbed: execute a workflow for real, with the tools of ``agentsched.tools``.

The driver's ``local`` backend. Start rules and all recording: ``driver.Driver`` (the shared
``rules.Dispatcher``, exactly as for the simulator); this backend only starts tasks on threads
and CUDA streams and reports when they end, against ``time.perf_counter``. What runs where:

* ``cpu``: a worker pool of ``cpu_workers`` threads (the Dispatcher's ``cpu_slots``), each task
  also taking one of the process's CPU slots when a service set them (``ToolPool.cpu_slot``);
* ``gpu_now``: its own thread and CUDA stream, concurrently with the other GPU tasks;
* ``gpu_queue``: takes its model from the pool when admitted, runs, gives it back; the
  Dispatcher admits one at a time (per run).

Warm tools (``tool_pool.ToolPool``, one per process): every instance stays loaded after a run, for
the next run of any workflow, testbed or ``Runtime`` in the process, and ``load()`` runs once per
instance. Before the clock starts, the run takes a loaded instance for each ``cpu`` task, and loads
``gpu_now`` tools onto the GPU where they fit beside what is resident (nothing is evicted for it).
A GPU task takes its instance from the pool when it starts: a warm hit pays nothing, else the
load is paid then and recorded as the span's ``load_ms`` (a ``gpu_queue`` task admitted with its
model already resident pays no load). GPU loads go through the pool's one VRAM ledger: idle
instances are evicted LRU to make room, else the task waits (its span starts after the wait), so
concurrent runs never exceed the budget together. The budget is enforced twice: by the ledger
(and each run's Dispatcher, from the workflow's cards) and by a ceiling on this process's CUDA
memory (``torch.cuda.set_per_process_memory_fraction``, set while any run is in progress); a
real CUDA out-of-memory ends the run as ``oom`` and the process keeps going. A tool that raises
ends it as ``error`` with a one-line message.

A task names a built-in tool (``clip``) or a user tool by import path (``package.module:Class``,
see ``agentsched.Tool``); either is called through ``call_tool`` alone: the public ``Tool.run``.
Runs may overlap (``concurrent_runs``): each thread drives its own run; a tool that does not
declare ``concurrent_safe = True`` gets one instance per concurrent use.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution
from agentsched.model.mapping import validate_mapping
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.cuda_scope import CudaScope, NullStream, torch_threads_enter, torch_threads_exit
from agentsched.testbeds.daemon_pool import DaemonPool
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure, is_oom
from agentsched.testbeds.real import (
    ToolFactory,
    base_and_k,
    builtin_tool,
    call_tool,
    load_failure,
    load_reason,
    quiet_loading,
    task_timeout,
)
from agentsched.testbeds.tool_pool import Lease, PoolKey, ToolPool, VramWontFit, shared_pool
from agentsched.tools import cuda_available

@dataclass
class _Done:
    """What a task's job reports when it ends."""

    start_s: float  # perf_counter when the job began (queue: before loading)
    end_s: float  # perf_counter when its last call finished
    load_ms: float  # load paid first (gpu_queue), measured
    output: Any  # what the tool returned (its last call)


class LocalBackend(Backend):
    """Real execution on this machine's CPU, and its CUDA GPU when present."""

    name = "local"
    deterministic = False

    def __init__(
        self,
        *,
        size: str = "small",
        device: str = "cuda",
        cpu_workers: int | None = None,
        seed: int = 0,
        memory_ceiling: bool = True,
        torch_threads: int | None = None,
        tool_factory: ToolFactory | None = None,
        task_timeout_s: float | None = None,
        pool: ToolPool | None = None,
    ) -> None:
        from agentsched.tools.base import normalize_device, parse_size

        self.size = parse_size(size).value  # tool scale: small or paper
        # where GPU placements run, e.g. cuda or cuda:1; "cpu" forbids GPU placements
        self.device = normalize_device(device)
        workers = cpu_workers if cpu_workers is not None else (os.cpu_count() or 1)
        if workers < 1:
            raise TestbedError(f"local testbed: cpu_workers must be >= 1, got {workers}")
        self.cpu_workers = workers  # concurrent CPU tasks (the Dispatcher's cpu_slots)
        self.seed = seed  # seed of every tool's weights and inputs
        self.memory_ceiling = memory_ceiling  # cap CUDA memory at the budget during a run
        # torch intra-op threads during a run (None: torch's default, one per core). Concurrent CPU
        # tasks each use them all, so e.g. cpu_workers=2 on 2 cores oversubscribes; set 1 to avoid it.
        self.torch_threads = torch_threads
        # builds the built-in tools (tests inject fakes); user tools (package.module:Class) need no extra
        self._factory = tool_factory if tool_factory is not None else builtin_tool
        if task_timeout_s is not None and not task_timeout_s > 0:
            raise TestbedError(f"local testbed: task_timeout_s must be > 0, got {task_timeout_s}")
        # a task running longer ends its execution as error; its thread is abandoned (Python cannot
        # stop it) and its tool instance dropped, built afresh next time (None: no limit)
        self.task_timeout_s = task_timeout_s
        # the loaded tools, shared with every other local testbed of the process (tests give their own)
        self.pool = pool if pool is not None else shared_pool()
        self.pool.attach()
        self._closed = False
        self._local = threading.local()  # the run in progress of each thread (runs may overlap)

    @property
    def cpu_slots(self) -> int | None:
        return self.cpu_workers

    @property
    def _run(self) -> _LocalRun | None:
        """This thread's run in progress (each concurrent run is driven by a thread of its own)."""
        return getattr(self._local, "run", None)

    @_run.setter
    def _run(self, run: _LocalRun | None) -> None:
        self._local.run = run

    # ---- environment -------------------------------------------------------------------------
    _real_cuda = staticmethod(cuda_available)  # a seam: tests replace it

    def _cuda_available(self) -> bool:
        """May GPU placements run here? (Tests replace it to drive fake GPU tools.)"""
        return self.device != "cpu" and self._real_cuda()

    def _check_gpu(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        # host-only tools on a GPU mode run as CPU tasks (rules.Dispatcher), so they need no CUDA
        real = effective_mapping(workflow.task_cards, mapping)
        on_gpu = [t for t in workflow.task_ids if real[t] is not Mode.CPU]
        if on_gpu and not self._cuda_available():
            t = on_gpu[0]
            raise TestbedError(
                f"task {t} ({workflow.tasks[t].tool_label}) is mapped to {mapping[t].value} but this machine "
                f"has no CUDA GPU: use --testbed sim, or map every task to cpu"
            )

    def preflight(self, workflow: Workflow) -> None:
        """Fail before any run when GPU placements cannot run here: every decision space offers
        gpu_now, and the oracle search and the policies place tasks there. Raises the one-line
        TestbedError that ``run`` would raise for the first GPU placement."""
        self._check_gpu(workflow, {t: Mode.GPU_NOW for t in workflow.task_ids})

    # ---- tools -------------------------------------------------------------------------------
    def _new_tool(self, base: str) -> Any:
        from agentsched.model.tool import is_tool_path, new_tool

        with quiet_loading():
            if is_tool_path(base):  # a user tool (package.module:Class)
                return new_tool(base)
            return self._factory(base, self.size, seed=self.seed)

    def _key(self, base: str, device: str) -> PoolKey:
        """The pool key of ``base`` on ``device``: a user tool by its class (or registered instance),
        a built-in one by size, seed and factory (tests inject fakes)."""
        from agentsched.model.tool import is_tool_path, resolve_tool

        if is_tool_path(base):
            return (base, device, ("user", resolve_tool(base)))
        return (base, device, ("builtin", self.size, self.seed, self._factory))

    def acquire(self, base: str, device: str, *, vram_mb: float = 0.0, budget_mb: float | None = None,
                wait: bool = True, evict: bool = True, stop: threading.Event | None = None) -> Lease | None:
        """A loaded instance of ``base`` on ``device`` from the pool (see ``ToolPool.acquire``)."""
        from agentsched.model.tool import is_tool_path, resolve_tool

        # a tool given as an instance (workflow_from_tools) is that one object: its users share it
        shared = is_tool_path(base) and not isinstance(resolve_tool(base), type)
        if budget_mb is None and vram_mb > 0:  # no budget anywhere: the GPU's own memory bounds residents
            budget_mb = self._device_mb()
        return self.pool.acquire(self._key(base, device), lambda: self._new_tool(base), vram_mb=vram_mb,
                                 budget_mb=budget_mb, wait=wait, evict=evict, stop=stop, shareable=shared)

    def _device_mb(self) -> float | None:
        """The GPU's memory (MB) on a real CUDA device; None otherwise (fake GPUs in tests)."""
        if not self._real_cuda():
            return None
        import torch

        return torch.cuda.get_device_properties(self.device).total_memory / 2**20

    def close(self) -> None:
        """Leave the pool; the last testbed to leave it unloads every idle instance."""
        if not self._closed:
            self._closed = True
            self.pool.detach()

    # ---- one run -----------------------------------------------------------------------------
    def begin(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None,
              expected: bool = False) -> Failure | None:
        """Warm models, then start the clock (``rng`` is unused: the noise is the machine's own)."""
        self._check_gpu(workflow, mapping)
        run = _LocalRun(self, workflow, mapping)
        self._run = run
        failure = run.warm()
        if failure is None:
            run.open()
        return failure

    def now_ms(self) -> float:
        assert self._run is not None
        return self._run.now_ms()

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        assert self._run is not None
        self._run.submit(start, inputs or {})

    def wait(self) -> list[Completion]:
        assert self._run is not None
        return self._run.wait()

    def abort(self) -> dict[str, float]:
        if self._run is not None:
            self._run.stop_all()
        return {}

    def end(self) -> dict[str, Any]:
        run, self._run = self._run, None
        return run.close() if run is not None else {}


class _LocalRun:
    """The per-run state of the local backend: leases of pooled tools, pools, CUDA scope, clock."""

    def __init__(self, backend: LocalBackend, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        self.b = backend
        self.workflow = workflow
        # where each task really runs: a tool whose card has no GPU figure runs its host code
        # wherever it is placed (as the Dispatcher starts it), so it is loaded on the host
        self.mapping = mapping = effective_mapping(workflow.task_cards, mapping)
        self.bases = {t: base_and_k(workflow, t) for t in workflow.task_ids}
        self.vram_mb = {t: workflow.task_cards[t].vram_needed_mb for t in workflow.task_ids}
        # each task's lease on a pooled instance: cpu tasks take theirs before the clock, GPU tasks
        # when they start; a started task's job gives it back (a timed-out one's is discarded)
        self.leases: dict[str, Lease] = {}
        self.started: set[str] = set()  # tasks whose job owns its lease
        self.paid: list[tuple[str, float]] = []  # (task, load_ms) of every lease taken by this run
        self.evicted: list[tuple[str, float]] = []  # (task, ms) unloading idle tools to make room for it
        self.uses_cuda = any(m is not Mode.CPU for m in mapping.values())
        self.stop = threading.Event()  # set when the execution fails: running tasks stop between calls
        self.running: dict[Future, str] = {}
        self.started_s: dict[Future, float] = {}  # perf_counter when each running task was submitted
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
                        pre = b.acquire(base, gpu, vram_mb=self.vram_mb[t], budget_mb=budget, wait=False,
                                        evict=False)
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
        for t, lease in list(self.leases.items()):
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
        self.gpu_pool = DaemonPool(max(1, sum(m is not Mode.CPU for m in self.mapping.values())), "agentsched-gpu")
        if self.cuda:
            self.cuda.enter()
        self.t0 = time.perf_counter()

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def _job(self, task: str, inputs: Mapping[str, Any]) -> _Done:
        mode, k, cuda = self.mapping[task], self.bases[task][1], self.cuda
        lease = self.leases.get(task)
        try:
            with (cuda.stream() if cuda and mode is not Mode.CPU else NullStream()) as stream:
                if lease is None:  # a GPU task: its instance now (warm hit, else loaded; may wait for VRAM)
                    lease = self.b.acquire(self.bases[task][0], self.b.device, vram_mb=self.vram_mb[task],
                                           budget_mb=self.workflow.vram_budget_mb, stop=self.stop)
                    assert lease is not None
                    self.leases[task] = lease
                    self.paid.append((task, lease.load_ms))
                    if lease.evict_ms:
                        self.evicted.append((task, lease.evict_ms))
                    stream.sync(lease.tool)
                    start = time.perf_counter() - lease.load_ms / 1000  # (after any wait for VRAM)
                    load_ms = lease.load_ms
                    output = call_tool(lease.tool, inputs, k, sync=stream.sync, stop=self.stop)
                else:
                    with self.b.pool.cpu_slot(self.stop):  # the process's CPU slots (a service's)
                        start, load_ms = time.perf_counter(), 0.0
                        output = call_tool(lease.tool, inputs, k, sync=stream.sync, stop=self.stop)
                end = time.perf_counter()
        finally:
            if lease is not None:
                self.b.pool.release(lease)  # kept loaded for the next use (unloaded if discarded)
        return _Done(start, end, load_ms, output)

    def submit(self, start: Start, inputs: Mapping[str, Any]) -> None:
        pool = self.cpu_pool if start.mode is Mode.CPU else self.gpu_pool
        assert pool is not None
        self.started.add(start.task)
        fut = pool.submit(self._job, start.task, inputs)
        self.running[fut] = start.task
        self.started_s[fut] = time.perf_counter()

    def wait(self) -> list[Completion]:
        timeout = self.b.task_timeout_s
        first = min(self.started_s[f] for f in self.running)
        left = None if timeout is None else max(first + timeout - time.perf_counter(), 0.0)
        done, _ = wait(list(self.running), timeout=left, return_when=FIRST_COMPLETED)
        if not done:  # the longest-running task ran over its timeout
            return [self._timed_out(next(f for f in self.running if self.started_s[f] == first))]
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
        return failed + [Completion(t, ms(d.start_s), ms(d.end_s), d.load_ms, d.output)
                         for t, d in sorted(finished, key=lambda x: x[1].end_s)]

    def _ms(self, at: float) -> float:
        return (at - self.t0) * 1000

    def _timed_out(self, fut: Future) -> Completion:
        """A task over its timeout: abandoned (its thread cannot be stopped), its tool instance dropped
        and never unloaded while it may still run; the next run builds and loads a new one."""
        task = self.running.pop(fut)
        started = self.started_s.pop(fut, self.t0)
        lease = self.leases.get(task)
        if lease is not None:  # (a GPU task still waiting for VRAM has none: it stops on its own)
            self.b.pool.discard(lease)
        now = self.now_ms()
        timeout = self.b.task_timeout_s
        return Completion(task, self._ms(started), now, error=task_timeout(timeout))

    def stop_all(self) -> None:
        """Let running tasks stop (between calls) before their models are released; with a task
        timeout, at most that long (a task still running then is abandoned, its instance dropped)."""
        self.stop.set()
        _, late = wait(list(self.running), timeout=self.b.task_timeout_s)
        for fut in late:
            self._timed_out(fut)
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
        extra: dict[str, Any] = {"size": b.size, "cpu_workers": b.cpu_workers,
                                 # the pool: uses served warm, and the loads this run paid (before the clock too)
                                 "tool_hits": sum(1 for _, ms in paid if ms == 0.0),
                                 "tool_loads": {t: round(ms, 3) for t, ms in paid if ms > 0.0}}
        if self.evicted:  # idle tools unloaded to make room in VRAM for a task (ms, before it started)
            extra["tool_evictions_ms"] = {t: round(ms, 3) for t, ms in self.evicted}
        if self.uses_cuda:  # (fake GPU tools in tests have no measured peak)
            extra.update(device=b.device, gpu_now="pooled")
            if measured is not None:
                extra["measured_peak_vram_mb"] = round(measured, 3)
        return extra


class LocalTestbed(Driver):
    """The local testbed: the driver over a ``LocalBackend`` (options as ``LocalBackend``)."""

    concurrent_runs = True  # Runtime: runs may overlap (each thread drives its own; tools from the pool)

    def __init__(self, **options: Any) -> None:
        super().__init__(LocalBackend(**options))

    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
            inputs: Mapping[str, Any] | None = None) -> Execution:
        """Execute once for real (``rng`` is unused: the noise is the machine's own)."""
        return super().run(workflow, validate_mapping(workflow, mapping), rng=rng, inputs=inputs)

    def host_only(self, workflow: Workflow) -> bool:
        """No CUDA here, for a workflow with a GPU-capable tool (torch is imported only then)."""
        b = self.backend
        return (any(c.has_gpu for c in workflow.task_cards.values())
                and isinstance(b, LocalBackend) and not b._cuda_available())

    @property
    def size(self) -> str:
        return self.backend.size  # type: ignore[attr-defined]

    @property
    def device(self) -> str:
        return self.backend.device  # type: ignore[attr-defined]

    @property
    def cpu_workers(self) -> int:
        return self.backend.cpu_workers  # type: ignore[attr-defined]
