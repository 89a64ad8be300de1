"""The local testbed: execute a workflow for real, with the tools of ``agentsched.tools``.

The driver's ``local`` backend. Start rules and all recording: ``driver.Driver`` (the shared
``rules.Dispatcher``, exactly as for the simulator); this backend only starts tasks on threads
and CUDA streams and reports when they end, against ``time.perf_counter``. What runs where:

* ``cpu``: a worker pool of ``cpu_workers`` threads (the Dispatcher's ``cpu_slots``);
* ``gpu_now``: its own thread and CUDA stream, concurrently with the other GPU tasks;
* ``gpu_queue``: loads its model when admitted (the span's ``load_ms``), runs, unloads; the
  Dispatcher admits one at a time.

Warm models: before the clock starts, every tool a ``cpu`` task needs is loaded on the host. A
``gpu_now`` tool is loaded onto the GPU too when the workflow has no VRAM budget; under a budget
it waits in host memory and is copied to the GPU when the task starts and back when it ends, so it
holds VRAM only while running, as the start rules assume. The budget is enforced twice: by
admission from the workflow's cards (the Dispatcher) and by a ceiling on this process's CUDA memory
(``torch.cuda.set_per_process_memory_fraction``); a real CUDA out-of-memory ends the run as ``oom``
and the process keeps going. A tool that raises ends it as ``error`` with a one-line message.

A task names a built-in tool (``clip``) or a user tool by import path (``package.module:Class``,
see ``agentsched.Tool``); either is called through ``call_tool`` alone: the public ``Tool.run``.

Loaded tools are cached across runs (the oracle and ``bench`` run many mappings); tools the next
workflow does not use are unloaded first, so e.g. llama_1b and llama_3b are never both kept.
"""

from __future__ import annotations

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
    unload_quietly,
)
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
        self._cache: dict[tuple[str, str], Any] = {}  # (base tool, device) -> loaded, shared tool
        self._run: _LocalRun | None = None  # the run in progress

    @property
    def cpu_slots(self) -> int | None:
        return self.cpu_workers

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

    def _shared(self, base: str, device: str) -> Any:
        """A cached tool loaded on ``device`` ("cpu" or the GPU), loading it when needed."""
        key = (base, device)
        if key not in self._cache:
            self._cache[key] = self._new_tool(base)
        tool = self._cache[key]
        try:
            with quiet_loading():
                tool.load(device)
        except BaseException:
            del self._cache[key]  # a tool whose load failed is never unloaded: built afresh next time
            raise
        return tool

    def _evict_unused(self, keep: set[tuple[str, str]]) -> None:
        for key in [k for k in self._cache if k not in keep]:
            unload_quietly(self._cache.pop(key), f"tool {key[0]} ({key[1]})")

    def close(self) -> None:
        self._evict_unused(set())

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
    """The per-run state of the local backend: tools, pools, CUDA scope, clock."""

    def __init__(self, backend: LocalBackend, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        self.b = backend
        self.workflow = workflow
        # where each task really runs: a tool whose card has no GPU figure runs its host code
        # wherever it is placed (as the Dispatcher starts it), so it is loaded on the host
        self.mapping = mapping = effective_mapping(workflow.task_cards, mapping)
        self.staged = workflow.vram_budget_mb is not None  # gpu_now weights wait on the host under a budget
        self.bases = {t: base_and_k(workflow, t) for t in workflow.task_ids}
        self.tools: dict[str, Any] = {}
        # tasks with their own instance loaded before the clock (staged gpu_now), unloaded after the
        # run; a gpu_queue task's own instance is loaded and unloaded by its job
        self.own = [t for t in workflow.task_ids if mapping[t] is Mode.GPU_NOW and self.staged]
        self.uses_cuda = any(m is not Mode.CPU for m in mapping.values())
        self.stop = threading.Event()  # set when the execution fails: running tasks stop between calls
        self.running: dict[Future, str] = {}
        self.started_s: dict[Future, float] = {}  # perf_counter when each running task was submitted
        self.opened = False  # the clock started (pools, CUDA scope, torch threads set)
        self.cuda: _CudaScope | None = None
        self.prev_threads: int | None = None
        self.cpu_pool: DaemonPool | None = None
        self.gpu_pool: DaemonPool | None = None
        self.t0 = 0.0

    def warm(self) -> Failure | None:
        """Warm models, before the clock starts. Cached tools of other workflows go first; under a
        budget so do GPU-resident ones (their VRAM would sit under the ceiling unaccounted)."""
        b, mapping, gpu = self.b, self.mapping, self.b.device
        used = {base for base, _ in self.bases.values()}
        b._evict_unused({k for k in b._cache if k[0] in used and (k[1] == "cpu" or not self.staged)})
        for t in self.workflow.task_ids:
            base = self.bases[t][0]
            try:
                if mapping[t] is Mode.CPU:
                    self.tools[t] = b._shared(base, "cpu")
                elif mapping[t] is Mode.GPU_NOW and not self.staged:
                    self.tools[t] = b._shared(base, gpu)
                elif mapping[t] is Mode.GPU_NOW:  # staged: own instance, host now, GPU while running
                    tool = b._new_tool(base)
                    with quiet_loading():
                        tool.load("cpu")
                    self.tools[t] = tool  # (only once loaded: a failed load is never unloaded)
                else:  # gpu_queue: own instance, loaded at admission
                    self.tools[t] = b._new_tool(base)
            except TestbedError:
                self._unload_own()
                raise
            except Exception as exc:  # noqa: BLE001 - a tool that cannot load fails the execution
                self._unload_own()
                return load_failure(self.workflow, t, is_oom(exc), load_reason(exc))
        return None

    def _unload_own(self) -> None:
        for o in self.own:
            if o in self.tools:
                unload_quietly(self.tools.pop(o), self._what(o))

    def _what(self, task: str) -> str:
        return f"task {task} ({self.workflow.task_cards[task].name})"

    def open(self) -> None:
        """Set torch threads, pools and the CUDA scope; start the clock."""
        b = self.b
        if b.torch_threads is not None:
            import torch

            self.prev_threads = torch.get_num_threads()
            torch.set_num_threads(b.torch_threads)
        self.opened = True
        if self.uses_cuda and b._real_cuda():
            self.cuda = _CudaScope(b.device, self.workflow.vram_budget_mb if b.memory_ceiling else None)
        self.cpu_pool = DaemonPool(b.cpu_workers, "agentsched-cpu")
        self.gpu_pool = DaemonPool(max(1, sum(m is not Mode.CPU for m in self.mapping.values())), "agentsched-gpu")
        if self.cuda:
            self.cuda.enter()
        self.t0 = time.perf_counter()

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def _job(self, task: str, inputs: Mapping[str, Any]) -> _Done:
        tool, mode, k = self.tools[task], self.mapping[task], self.bases[task][1]
        device, cuda = self.b.device, self.cuda
        start = time.perf_counter()
        load_ms = 0.0
        loaded = False  # gpu_queue: unloaded after the task only when its load succeeded
        with (cuda.stream() if cuda and mode is not Mode.CPU else _NullStream()) as stream:
            try:
                if mode is Mode.GPU_QUEUE:
                    tool.load(device)
                    loaded = True
                    stream.sync(tool)
                    load_ms = (time.perf_counter() - start) * 1000
                elif mode is Mode.GPU_NOW and self.staged:
                    tool.move(device)
                output = call_tool(tool, inputs, k, sync=stream.sync, stop=self.stop)
                end = time.perf_counter()
            finally:
                if mode is Mode.GPU_QUEUE and loaded:
                    unload_quietly(tool, self._what(task))
                # (a user tool has no "loaded": only the public load/run/unload are required)
                elif mode is Mode.GPU_NOW and self.staged and getattr(tool, "loaded", True):
                    tool.move("cpu")
        return _Done(start, end, load_ms, output)

    def submit(self, start: Start, inputs: Mapping[str, Any]) -> None:
        pool = self.cpu_pool if start.mode is Mode.CPU else self.gpu_pool
        assert pool is not None
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
        tool = self.tools.pop(task, None)
        for key, cached in list(self.b._cache.items()):
            if cached is tool:
                del self.b._cache[key]
        if task in self.own:
            self.own.remove(task)
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
        """Stop what runs, shut the pools, restore CUDA and torch threads, unload own tools;
        the run's details for ``Execution.extra``."""
        b = self.b
        if not self.opened:  # failed before the clock started
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
                import torch

                torch.set_num_threads(self.prev_threads)
            self._unload_own()
        extra: dict[str, Any] = {"size": b.size, "cpu_workers": b.cpu_workers}
        if self.uses_cuda:  # (fake GPU tools in tests have no measured peak)
            extra.update(device=b.device, gpu_now="staged" if self.staged else "resident")
            if measured is not None:
                extra["measured_peak_vram_mb"] = round(measured, 3)
        return extra


class LocalTestbed(Driver):
    """The local testbed: the driver over a ``LocalBackend`` (options as ``LocalBackend``)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(LocalBackend(**options))

    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
            inputs: Mapping[str, Any] | None = None) -> Execution:
        """Execute once for real (``rng`` is unused: the noise is the machine's own)."""
        return super().run(workflow, validate_mapping(workflow, mapping), rng=rng, inputs=inputs)

    @property
    def size(self) -> str:
        return self.backend.size  # type: ignore[attr-defined]

    @property
    def device(self) -> str:
        return self.backend.device  # type: ignore[attr-defined]

    @property
    def cpu_workers(self) -> int:
        return self.backend.cpu_workers  # type: ignore[attr-defined]


class _NullStream:
    """Host tasks: no stream; ``sync`` is the tool's own (a no-op on the CPU)."""

    def __enter__(self) -> _NullStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sync(self, tool: Any) -> None:
        tool.sync()


class _CudaScope:
    """Per-run CUDA state: a memory ceiling at the VRAM budget, streams, the measured peak."""

    def __init__(self, device: str, budget_mb: float | None) -> None:
        self.device = device  # e.g. "cuda" or "cuda:1"
        self.budget_mb = budget_mb  # ceiling above what is resident at the start (None: no ceiling)
        self.base_bytes = 0  # allocated when the run started (resident models)

    def enter(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()  # the ceiling counts reserved memory: drop cached blocks first
        self.base_bytes = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        if self.budget_mb is not None:
            total = torch.cuda.get_device_properties(self.device).total_memory
            frac = min(1.0, (self.base_bytes + self.budget_mb * 2**20) / total)
            torch.cuda.set_per_process_memory_fraction(frac, self.device)

    def exit(self) -> float:
        """Restore the ceiling, free cached blocks; return the peak allocated above the start (MB)."""
        import torch

        torch.cuda.synchronize(self.device)
        peak = (torch.cuda.max_memory_allocated(self.device) - self.base_bytes) / 2**20
        if self.budget_mb is not None:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)
        torch.cuda.empty_cache()
        return max(peak, 0.0)

    def stream(self) -> _CudaStream:
        return _CudaStream(self.device)


class _CudaStream:
    """A task's own CUDA stream, so concurrent gpu_now tasks overlap; ``sync`` waits for it only."""

    def __init__(self, device: str) -> None:
        import torch

        self.stream = torch.cuda.Stream(device=device)  # this task's stream
        self._ctx = torch.cuda.stream(self.stream)

    def __enter__(self) -> _CudaStream:
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.synchronize()
        self._ctx.__exit__(*exc)

    def sync(self, tool: Any) -> None:
        if tool.device is not None and tool.device.startswith("cuda"):
            self.stream.synchronize()
