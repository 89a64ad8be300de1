"""The local testbed: execute a workflow for real, with the tools of ``agentsched.tools``.

The driver's ``local`` backend. Start rules and all recording: ``driver.Driver`` (the shared
``rules.Dispatcher``, exactly as for the simulator); this backend only starts tasks on threads
and CUDA streams and reports when they end, against ``time.perf_counter``. What runs where:

* ``cpu``: a worker pool of ``cpu_workers`` threads (the Dispatcher's ``cpu_slots``), each task
  also taking one of the process's CPU slots when a service set them (``ToolPool.cpu_slot``);
* ``gpu_now``: its own thread and CUDA stream, concurrently with the other GPU tasks;
* ``gpu_queue``: takes its model from the pool when admitted, runs, gives it back; the
  Dispatcher admits one at a time (per run; with live placement, one at a time for the process:
  ``live_machine.LiveMachine``).

Live placement (``begin_live``, ``Driver.run_live``): a run begins with no mapping and each task
is placed when it becomes ready by a ``Placer`` over the process's live state. One run's state
(leases, worker pools, CUDA scope, clock, the job each task runs) is ``local_run.LocalRun``.

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

import os
import random
import threading
from collections.abc import Mapping
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution
from agentsched.model.mapping import validate_mapping
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure, Placer
from agentsched.testbeds.local_run import LocalRun
from agentsched.testbeds.real import ToolFactory, builtin_tool, quiet_loading
from agentsched.testbeds.tool_pool import Lease, PoolKey, ToolPool, shared_pool
from agentsched.tools import cuda_available


def machine_id(device: str = "cuda") -> str:
    """What names this machine for what is learned on it (``serve --placement live`` keeps its learned
    contention under it): its GPU's name (``no-cuda`` without one) and its CPU count. A store moved to
    another machine then starts from the priors there, even where the cards were not re-profiled."""
    gpu = "no-cuda"
    if device != "cpu" and LocalBackend._real_cuda():
        import torch

        gpu = torch.cuda.get_device_name(device)
    return f"local:{gpu}:{os.cpu_count() or 1} cpus"


class LocalBackend(Backend):
    """Real execution on this machine's CPU, and its CUDA GPU when present."""

    name = "local"
    deterministic = False
    late_binding = True  # live placement: a run may begin with no mapping (Driver.run_live)

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
    def _run(self) -> LocalRun | None:
        """This thread's run in progress (each concurrent run is driven by a thread of its own)."""
        return getattr(self._local, "run", None)

    @_run.setter
    def _run(self, run: LocalRun | None) -> None:
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

    def acquire(
        self,
        base: str,
        device: str,
        *,
        vram_mb: float = 0.0,
        budget_mb: float | None = None,
        wait: bool = True,
        evict: bool = True,
        stop: threading.Event | None = None,
    ) -> Lease | None:
        """A loaded instance of ``base`` on ``device`` from the pool (see ``ToolPool.acquire``)."""
        from agentsched.model.tool import is_tool_path, resolve_tool

        # a tool given as an instance (workflow_from_tools) is that one object: its users share it
        shared = is_tool_path(base) and not isinstance(resolve_tool(base), type)
        if budget_mb is None and vram_mb > 0:  # no budget anywhere: the GPU's own memory bounds residents
            budget_mb = self._device_mb()
        return self.pool.acquire(
            self._key(base, device),
            lambda: self._new_tool(base),
            vram_mb=vram_mb,
            budget_mb=budget_mb,
            wait=wait,
            evict=evict,
            stop=stop,
            shareable=shared,
        )

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
    def begin(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None, expected: bool = False
    ) -> Failure | None:
        """Warm models, then start the clock (``rng`` is unused: the noise is the machine's own)."""
        self._check_gpu(workflow, mapping)
        run = LocalRun(self, workflow, mapping)
        self._run = run
        failure = run.warm()
        if failure is None:
            run.open()
        return failure

    def begin_live(self, workflow: Workflow, placer: Placer) -> Failure | None:
        """``begin`` with no mapping: nothing is warmed before the clock (each task takes its tool
        from the pool when it starts, a warm hit in a serving process); ``placer.run_started`` is
        told when each task really begins (its CPU slot taken, its GPU instance ready)."""
        self.preflight(workflow)  # any GPU-capable task may be placed on the GPU
        run = LocalRun(self, workflow, {}, placer=placer)
        self._run = run
        run.open()
        return None

    def wait_up_to(self, timeout_s: float) -> list[Completion]:
        assert self._run is not None
        return self._run.wait(timeout_s)

    def now_ms(self) -> float:
        assert self._run is not None
        return self._run.now_ms()

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        assert self._run is not None
        self._run.submit(start, inputs or {})

    def wait(self) -> list[Completion]:
        assert self._run is not None
        return self._run.wait()

    def abort(self, wait: bool = True) -> dict[str, float]:
        if self._run is not None:
            self._run.stop_all(wait)
        return {}

    def end(self) -> dict[str, Any]:
        run, self._run = self._run, None
        return run.close() if run is not None else {}


class LocalTestbed(Driver):
    """The local testbed: the driver over a ``LocalBackend`` (options as ``LocalBackend``)."""

    concurrent_runs = True  # Runtime: runs may overlap (each thread drives its own; tools from the pool)

    def __init__(self, **options: Any) -> None:
        super().__init__(LocalBackend(**options))

    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Execute once for real (``rng`` is unused: the noise is the machine's own)."""
        return super().run(workflow, validate_mapping(workflow, mapping), rng=rng, inputs=inputs)

    def host_only(self, workflow: Workflow) -> bool:
        """No CUDA here, for a workflow with a GPU-capable tool (torch is imported only then)."""
        b = self.backend
        return (
            any(c.has_gpu for c in workflow.task_cards.values())
            and isinstance(b, LocalBackend)
            and not b._cuda_available()
        )

    @property
    def size(self) -> str:
        return self.backend.size  # type: ignore[attr-defined]

    @property
    def device(self) -> str:
        return self.backend.device  # type: ignore[attr-defined]

    @property
    def cpu_workers(self) -> int:
        return self.backend.cpu_workers  # type: ignore[attr-defined]
