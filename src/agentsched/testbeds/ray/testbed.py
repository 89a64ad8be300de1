"""The ray testbed: the driver over a ``RayBackend``, and K invocations run at once on one cluster."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.driver import Driver
from agentsched.testbeds.ray.backend import RayBackend
from agentsched.testbeds.ray.cluster import EMULATED_NOTE, Cluster, cuda_memory_mb, ray_module
from agentsched.testbeds.ray.placement import NodeInfo, too_big
from agentsched.testbeds.real import ToolFactory, builtin_tool

DEFAULT_TIMEOUT_S = 3600.0  # longest one run may take before it ends as error (never a hang)


@dataclass(frozen=True)
class ConcurrentResult:
    """K invocations run at once: each one's Execution, the wall time of the batch, the throughput."""

    executions: tuple[Execution, ...]
    wall_s: float

    @property
    def throughput_per_s(self) -> float:
        """Finished (ok) invocations per second of wall time."""
        ok = sum(e.ok for e in self.executions)
        return ok / self.wall_s if self.wall_s > 0 else 0.0


class RayTestbed(Driver):
    """The ray testbed: the driver over a ``RayBackend`` on a local instance or a running cluster."""

    # Runtime: runs may overlap. A run that starts while another is in progress takes a driver of
    # its own over the one cluster (as ``run_concurrent``'s invocations do), kept for later overlaps.
    concurrent_runs = True

    def __init__(
        self,
        *,
        address: str | None = None,
        size: str = "small",
        seed: int = 0,
        emulate_gpu: bool = False,
        emulated_gpus: int = 1,
        cpu_slots: int | None = None,
        vram_mb: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        torch_threads: int | None = None,
        tool_factory: ToolFactory | None = None,
    ) -> None:
        """``address``: None starts a local instance, ``auto`` or ``HOST:PORT`` joins a cluster;
        ``emulate_gpu``: GPU placements run on the CPU holding the GPU share and vram_mb;
        ``emulated_gpus``: fake GPUs a local instance declares then; ``cpu_slots``: the Dispatcher's
        CPU cap (None: the cluster's CPUs) and a local instance's CPUs; ``vram_mb``: what a local
        instance declares (None: its GPUs' memory, else the workflow's budget); ``timeout_s``: a run
        longer than this ends as error; ``tool_factory``: builds built-in tools (must pickle)."""
        from agentsched.tools.base import parse_size

        ray_module()  # a one-line error now when the extra is missing
        if emulated_gpus < 1:
            raise TestbedError(f"ray testbed: emulated_gpus must be >= 1, got {emulated_gpus}")
        if cpu_slots is not None and cpu_slots < 1:
            raise TestbedError(f"ray testbed: cpu_slots must be >= 1, got {cpu_slots}")
        if not timeout_s > 0:
            raise TestbedError(f"ray testbed: timeout_s must be > 0, got {timeout_s}")
        if tool_factory is None:
            tool_factory = builtin_tool  # user tools (import paths) need no tools extra
        self.cluster = Cluster(
            address=address or None,
            size=parse_size(size).value,
            seed=seed,
            emulate_gpu=emulate_gpu,
            emulated_gpus=emulated_gpus,
            cpu_slots=cpu_slots,
            vram_mb=vram_mb,
            timeout_s=timeout_s,
            torch_threads=torch_threads,
            tool_factory=tool_factory,
        )
        super().__init__(RayBackend(self.cluster))
        self._drivers_lock = threading.Lock()
        self._busy = False  # this driver runs one now
        self._spare: list[Driver] = []  # idle drivers for overlapping runs (their backends share the cluster)

    @property
    def size(self) -> str:
        return self.cluster.size

    @property
    def emulate_gpu(self) -> bool:
        return self.cluster.emulate_gpu

    def host_only(self, workflow: Workflow) -> bool:
        """A cluster without GPUs (neither real nor emulated), for a workflow with a GPU-capable tool."""
        return any(c.has_gpu for c in workflow.task_cards.values()) and not self.gpu_available(workflow)

    def gpu_unfit(self, workflow: Workflow) -> dict[str, str]:
        """Profiled GPU tasks no node's vram_mb can hold (a cold-start card's VRAM is a guess: kept)."""
        if not self.gpu_available(workflow):
            return {}
        nodes = self.cluster.nodes()
        why = {t: too_big(workflow, t, nodes) for t in workflow.task_ids if t not in workflow.unprofiled}
        return {t: w for t, w in why.items() if w is not None}

    def gpu_available(self, workflow: Workflow | None = None) -> bool:
        """May GPU placements run on the cluster: a node with a GPU and vram_mb, whose GPUs are real
        (a joined cluster's, or this machine's CUDA) or emulated? Connects first."""
        c = self.cluster
        c.connect(workflow)
        if not any(n.gpus > 0 and n.vram_mb > 0 for n in c.nodes()):
            return False
        return c.emulate_gpu or c.address is not None or bool(cuda_memory_mb())

    def check_mapping(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        """Connect, and fail in one line before any run when ``mapping`` itself cannot run on the
        cluster (a GPU placement and no GPU node). Unlike ``preflight``, an all-cpu mapping passes on a
        CPU-only cluster."""
        mapping = validate_mapping(workflow, mapping)
        self.cluster.connect(workflow)
        self.cluster.check_gpu(workflow, mapping)

    def nodes(self) -> list[NodeInfo]:
        """The cluster's alive nodes (connecting first)."""
        self.cluster.connect()
        return self.cluster.nodes()

    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Execute once on the cluster (``rng`` is unused: the noise is the cluster's own); a run
        that overlaps one in progress runs on a driver of its own (``concurrent_runs``)."""
        mapping = validate_mapping(workflow, mapping)
        with self._drivers_lock:
            driver: Driver | None = (
                None if not self._busy else (self._spare.pop() if self._spare else Driver(RayBackend(self.cluster)))
            )
            self._busy = self._busy or driver is None
        try:
            if driver is None:
                return super().run(workflow, mapping, rng=rng, inputs=inputs)
            return driver.run(workflow, mapping, rng=rng, inputs=inputs)
        finally:
            with self._drivers_lock:
                if driver is None:
                    self._busy = False
                else:
                    self._spare.append(driver)

    def run_concurrent(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        k: int,
        *,
        inputs: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    ) -> ConcurrentResult:
        """Run ``k`` invocations of one workflow at once across the cluster: each on its own thread
        with its own driver and start rules (its own Dispatcher and VRAM budget), all on one Ray
        cluster that places every lease by its resources. ``inputs``: one set for every invocation,
        or a sequence of ``k`` sets, one per invocation."""
        if k < 1:
            raise TestbedError(f"concurrency must be >= 1, got {k}")
        each = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs] * k
        if len(each) != k:
            raise TestbedError(f"{len(each)} input sets for {k} concurrent invocations")
        mapping = validate_mapping(workflow, mapping)
        c = self.cluster
        c.connect(workflow)
        c.check_gpu(workflow, mapping)
        nodes = c.nodes()
        c.start_workers(
            effective_mapping(workflow.task_cards, mapping),
            k,
            nodes,
            c.cpu_slots or max(1, int(sum(n.cpus for n in nodes))),
        )
        drivers = [self] + [Driver(RayBackend(c)) for _ in range(k - 1)]
        results: list[Execution | BaseException | None] = [None] * k
        barrier = threading.Barrier(k)

        def one(i: int) -> None:
            try:
                barrier.wait()  # start together
                results[i] = drivers[i].run(workflow, mapping, inputs=each[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,), name=f"agentsched-ray-{i}") for i in range(k)]
        t0 = time.time()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall_s = time.time() - t0
        for res in results:
            if isinstance(res, BaseException):
                raise res
        return ConcurrentResult(tuple(r for r in results if isinstance(r, Execution)), wall_s)


def emulation_note(testbed: Testbed) -> str | None:
    """The line every output of an emulated-GPU run carries; None for any other testbed."""
    return EMULATED_NOTE if isinstance(testbed, RayTestbed) and testbed.emulate_gpu else None
