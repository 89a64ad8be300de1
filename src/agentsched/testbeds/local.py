"""The local testbed: execute a workflow for real, with the tools of ``agentsched.tools``.

Start rules: the shared ``rules.Dispatcher``, exactly as the simulator drives it. After every
finish the testbed calls ``poll()`` and starts exactly the tasks it returns; an ``Infeasible``
ends the run as ``oom``. What runs where:

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

Data flow: ``run(..., inputs=...)`` gives the invocation's arguments to every source task; a task
with predecessors receives ``{pred_task_id: pred_output}``; ``Execution.outputs`` holds every
finished task's output. A tool is called through ``_call_tool`` alone (the public ``Tool.run``).
Outputs are kept only when the run was given ``inputs`` (a runtime invocation): the oracle and
``bench`` run thousands of executions whose tensors nobody reads. A task names a built-in tool
(``clip``) or a user tool by import path (``package.module:Class``, see ``agentsched.Tool``).

Loaded tools are cached across runs (the oracle and ``bench`` run many mappings); tools the next
workflow does not use are unloaded first, so e.g. llama_1b and llama_3b are never both kept.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.rules import Dispatcher, Infeasible

ToolFactory = Callable[..., Any]  # (name, size, seed=...) -> an unloaded Tool


class _Cancelled(Exception):
    """A running task stopped early because the execution already failed."""


@dataclass
class _Done:
    """What a task's job reports when it ends."""

    start_s: float  # perf_counter when the job began (queue: before loading)
    end_s: float  # perf_counter when its last call finished
    load_ms: float  # load paid first (gpu_queue), measured
    output: Any = None  # what the tool's last call returned


def _call_tool(tool: Any, inputs: dict[str, Any]) -> Any:
    """The one place a task's tool is called: the public ``Tool.run(inputs)``."""
    return tool.run(inputs)


def _is_oom(exc: BaseException) -> bool:
    """A real CUDA out-of-memory (torch's error type, or its message on older versions)."""
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    return isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Building and loading tools prints nothing: transformers' logging at error level (set before
    it is first imported, through TRANSFORMERS_VERBOSITY, and after), Python warnings ignored, so
    no warning precedes a command's one-line error or output."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _set_transformers_quiet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    _set_transformers_quiet()


def _set_transformers_quiet() -> None:
    if "transformers" in sys.modules:  # never import it just for this (host-only tools do not need it)
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
        except Exception:  # noqa: BLE001 - a transformers without this API: nothing to silence
            pass


class LocalTestbed(Testbed):
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
        if tool_factory is None:
            from agentsched.tools import get_tool, tools_installed

            if not tools_installed():
                raise TestbedError("the local testbed needs the tools extra: pip install 'agentsched[tools]'")
            tool_factory = get_tool
        self._factory = tool_factory  # builds tools (tests inject fakes)
        self._cache: dict[tuple[str, str], Any] = {}  # (base tool, device) -> loaded, shared tool

    # ---- environment -------------------------------------------------------------------------
    @staticmethod
    def _real_cuda() -> bool:
        try:
            import torch
        except ImportError:
            return False
        return torch.cuda.is_available()

    def _cuda_available(self) -> bool:
        """May GPU placements run here? (Tests replace it to drive fake GPU tools.)"""
        return self.device != "cpu" and self._real_cuda()

    def _check_gpu(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        # host-only tools on a GPU mode run as CPU tasks (rules.Dispatcher), so they need no CUDA
        cards = workflow.task_cards
        on_gpu = [t for t in workflow.task_ids if mapping[t] is not Mode.CPU and cards[t].has_gpu]
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
    def _base_and_k(self, workflow: Workflow, task: str) -> tuple[str, int]:
        from agentsched.model.tool import is_tool_path
        from agentsched.tools import parse_tool_name

        t = workflow.tasks[task]
        if is_tool_path(t.tool):  # a user tool: repeat is its only amplification
            return t.tool, t.repeat
        base, k = parse_tool_name(t.tool)
        return base, k * t.repeat

    def _new_tool(self, base: str) -> Any:
        from agentsched.model.tool import is_tool_path, new_tool

        with quiet_loading():
            if is_tool_path(base):
                return new_tool(base)
            return self._factory(base, self.size, seed=self.seed)

    def _shared(self, base: str, device: str) -> Any:
        """A cached tool loaded on ``device`` ("cpu" or the GPU), loading it when needed."""
        key = (base, device)
        if key not in self._cache:
            self._cache[key] = self._new_tool(base)
        tool = self._cache[key]
        with quiet_loading():
            tool.load(device)
        return tool

    def _evict_unused(self, keep: set[tuple[str, str]]) -> None:
        for key in [k for k in self._cache if k not in keep]:
            self._cache.pop(key).unload()

    def close(self) -> None:
        self._evict_unused(set())

    # ---- run ---------------------------------------------------------------------------------
    def run(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Execute once for real (``rng`` is unused: the noise is the machine's own). ``inputs``:
        the invocation's arguments, given to every source task (None: none, outputs not kept)."""
        mapping = validate_mapping(workflow, mapping)
        self._check_gpu(workflow, mapping)
        gpu = self.device
        staged = workflow.vram_budget_mb is not None  # gpu_now weights wait on the host under a budget
        bases = {t: self._base_and_k(workflow, t) for t in workflow.task_ids}

        # Warm models, before the clock starts. Cached tools of other workflows go first; under a
        # budget so do GPU-resident ones (their VRAM would sit under the ceiling unaccounted).
        used = {b for b, _ in bases.values()}
        self._evict_unused({k for k in self._cache if k[0] in used and (k[1] == "cpu" or not staged)})
        tools: dict[str, Any] = {}
        own = [t for t in workflow.task_ids  # tasks with their own instance, unloaded after the run
               if mapping[t] is Mode.GPU_QUEUE or (mapping[t] is Mode.GPU_NOW and staged)]
        for t in workflow.task_ids:
            base = bases[t][0]
            try:
                if mapping[t] is Mode.CPU:
                    tools[t] = self._shared(base, "cpu")
                elif mapping[t] is Mode.GPU_NOW and not staged:
                    tools[t] = self._shared(base, gpu)
                elif mapping[t] is Mode.GPU_NOW:  # staged: own instance, host now, GPU while running
                    tools[t] = self._new_tool(base)
                    with quiet_loading():
                        tools[t].load("cpu")
                else:  # gpu_queue: own instance, loaded at admission
                    tools[t] = self._new_tool(base)
            except TestbedError:
                raise
            except Exception as exc:  # noqa: BLE001 - a tool that cannot load fails the execution
                for o in own:
                    if o in tools:
                        tools[o].unload()
                return self._load_failure(workflow, mapping, t, exc)
        prev_threads = None
        if self.torch_threads is not None:
            import torch

            prev_threads = torch.get_num_threads()
            torch.set_num_threads(self.torch_threads)
        try:
            return self._execute(workflow, mapping, tools, bases, staged, inputs)
        finally:
            if prev_threads is not None:
                import torch

                torch.set_num_threads(prev_threads)
            for t in own:
                tools[t].unload()

    def _load_failure(self, workflow: Workflow, mapping: dict[str, Mode], task: str, exc: Exception) -> Execution:
        """The record of a run that failed before its clock started (a warm load raised)."""
        name = workflow.task_cards[task].name
        if _is_oom(exc):
            status, msg = Status.OOM, f"task {task} ({name}): CUDA out of memory while loading: {_one_line(exc)}"
        else:
            status, msg = Status.ERROR, f"task {task} ({name}) failed to load: {_one_line(exc)}"
        return Execution(status=status, mapping=dict(mapping), e2e_ms=None, elapsed_ms=0.0, peak_vram_mb=0.0,
                         spans=(), message=msg, testbed=self.name,
                         extra={"size": self.size, "failed_task": task})

    def _execute(self, workflow: Workflow, mapping: dict[str, Mode], tools: dict[str, Any],
                 bases: dict[str, tuple[str, int]], staged: bool,
                 inputs: Mapping[str, Any] | None = None) -> Execution:
        cards = workflow.task_cards
        disp = Dispatcher(workflow, mapping, cards, cpu_slots=self.cpu_workers)
        uses_cuda = any(m is not Mode.CPU for m in mapping.values())
        stop = threading.Event()  # set when the execution fails: running tasks stop between calls
        cuda = (_CudaScope(self.device, workflow.vram_budget_mb if self.memory_ceiling else None)
                if uses_cuda and self._real_cuda() else None)

        outputs: dict[str, Any] = {}  # task -> output, written by the loop below only
        args = dict(inputs or {})

        def job(task: str) -> _Done:
            tool, mode, k = tools[task], mapping[task], bases[task][1]
            preds = workflow.preds[task]
            task_inputs = {p: outputs[p] for p in preds} if preds else dict(args)
            out = None
            start = time.perf_counter()
            load_ms = 0.0
            with (cuda.stream() if cuda and mode is not Mode.CPU else _NullStream()) as stream:
                try:
                    if mode is Mode.GPU_QUEUE:
                        tool.load(self.device)
                        stream.sync(tool)
                        load_ms = (time.perf_counter() - start) * 1000
                    elif mode is Mode.GPU_NOW and staged:
                        tool.move(self.device)
                    for _ in range(k):
                        if stop.is_set():
                            raise _Cancelled
                        out = _call_tool(tool, task_inputs)
                        stream.sync(tool)
                    end = time.perf_counter()
                finally:
                    if mode is Mode.GPU_QUEUE:
                        tool.unload()
                    elif mode is Mode.GPU_NOW and staged and getattr(tool, "loaded", True):
                        tool.move("cpu")
            return _Done(start, end, load_ms, out)

        ready_at: dict[str, float] = {t: 0.0 for t in workflow.task_ids if not workflow.preds[t]}
        starts_at: dict[str, float] = {}
        ends_at: dict[str, float] = {}
        loads: dict[str, float] = {}
        vram_of: dict[str, float] = {}
        order: list[str] = []
        vram_timeline: list[tuple[float, float]] = [(0.0, 0.0)]
        peak = 0.0
        failure: tuple[Status, str, str, float] | None = None  # status, message, task, needed MB
        running: dict[Future, str] = {}
        cpu_pool = ThreadPoolExecutor(self.cpu_workers, thread_name_prefix="agentsched-cpu")
        gpu_pool = ThreadPoolExecutor(max(1, sum(m is not Mode.CPU for m in mapping.values())),
                                      thread_name_prefix="agentsched-gpu")
        if cuda:
            cuda.enter()
        t0 = time.perf_counter()

        def ms(at: float) -> float:
            return (at - t0) * 1000

        try:
            while True:
                decision = disp.poll()
                if isinstance(decision, Infeasible):
                    failure = (Status.OOM, decision.message, decision.task, decision.needed_mb)
                    break
                for st in decision:
                    order.append(st.task)
                    starts_at[st.task] = ms(time.perf_counter())
                    vram_of[st.task] = st.vram_mb
                    pool = cpu_pool if st.mode is Mode.CPU else gpu_pool
                    running[pool.submit(job, st.task)] = st.task
                if decision:
                    if disp.vram_in_use_mb != vram_timeline[-1][1]:
                        vram_timeline.append((starts_at[decision[-1].task], disp.vram_in_use_mb))
                    peak = max(peak, disp.vram_in_use_mb)
                if not running:
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                finished: list[tuple[str, _Done]] = []
                for fut in done:
                    task = running.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        finished.append((task, fut.result()))
                    elif failure is None:
                        if _is_oom(exc):
                            msg = f"task {task} ({cards[task].name}): CUDA out of memory: {_one_line(exc)}"
                            failure = (Status.OOM, msg, task, disp.vram_in_use_mb)
                        else:
                            failure = (Status.ERROR, f"task {task} ({cards[task].name}) failed: {_one_line(exc)}",
                                       task, 0.0)
                for task, d in sorted(finished, key=lambda x: x[1].end_s):
                    starts_at[task] = ms(d.start_s)
                    ends_at[task] = ms(d.end_s)
                    loads[task] = d.load_ms
                    outputs[task] = d.output
                    for nt in disp.finish(task):
                        ready_at[nt] = ends_at[task]
                    if disp.vram_in_use_mb != vram_timeline[-1][1]:
                        vram_timeline.append((ends_at[task], disp.vram_in_use_mb))
                if failure is not None:
                    break
        finally:
            fail_ms = ms(time.perf_counter())
            stop.set()
            wait(list(running))  # let running tasks stop (between calls) before releasing models
            cpu_pool.shutdown(wait=True)
            gpu_pool.shutdown(wait=True)
            measured = cuda.exit() if cuda else None

        extra: dict[str, Any] = {"size": self.size, "cpu_workers": self.cpu_workers}
        if uses_cuda:  # (fake GPU tools in tests have no measured peak)
            extra.update(device=self.device, gpu_now="staged" if staged else "resident")
            if measured is not None:
                extra["measured_peak_vram_mb"] = round(measured, 3)
        spans = tuple(
            TaskSpan(task=t, tool=cards[t].name, mode=mapping[t], ready_ms=ready_at.get(t, starts_at[t]),
                     start_ms=starts_at[t], end_ms=ends_at.get(t), load_ms=loads.get(t, 0.0),
                     vram_mb=vram_of.get(t, 0.0))
            for t in order
        )
        if failure is not None:
            status, message, task, needed = failure
            return Execution(status=status, mapping=dict(mapping), e2e_ms=None, elapsed_ms=fail_ms,
                             peak_vram_mb=max(peak, needed), spans=spans, vram_timeline=tuple(vram_timeline),
                             message=message, testbed=self.name, extra={**extra, "failed_task": task},
                             outputs=dict(outputs) if inputs is not None else {})
        e2e = max(ends_at[t] for t in workflow.sinks)
        return Execution(status=Status.OK, mapping=dict(mapping), e2e_ms=e2e, elapsed_ms=e2e, peak_vram_mb=peak,
                         spans=spans, vram_timeline=tuple(vram_timeline), testbed=self.name, extra=extra,
                         outputs=dict(outputs) if inputs is not None else {})


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
