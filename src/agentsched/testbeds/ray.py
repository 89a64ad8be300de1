"""The ray testbed: execute a workflow on a Ray cluster, with VRAM admission by Ray's own resources.

agentsched decides the placement; Ray carries it out. Start rules: the shared ``rules.Dispatcher``,
exactly as the simulator and the local testbed drive it (a start that cannot fit the workflow's
VRAM budget is an ``oom`` execution). Every started task is a Ray task, a *lease*, that requests
what its placement needs, so Ray chooses the node and never over-commits one:

* ``cpu``: ``num_cpus=1``;
* ``gpu_now``: a GPU share (``num_gpus=GPU_SHARE``) and the task's VRAM as the custom resource
  ``vram_mb``, which every GPU node declares (its GPUs' memory, or the workflow's budget), so Ray
  itself refuses to co-locate GPU tasks beyond a node's memory;
* ``gpu_queue``: the same request; the lease hands the task to its node's serial queue actor
  (``max_concurrency=1``, one per GPU) that loads the tool's model when admitted, runs it, unloads.

Leases are spread over the nodes (``SPREAD``). A lease runs the tool in an actor of its own node
(``_ToolHost``: the node's loaded tools, kept across runs, loaded before the clock starts as the
local testbed does), so repeated rounds reload only what the other testbeds would; the lease holds
its resources until the tool returns. A node that dies mid-run makes Ray retry the lease elsewhere
(``max_retries``) or ends the run as ``error``; every run is bounded by ``timeout_s``.

``emulate_gpu``: for machines without CUDA (tests, demos). GPU placements run their CPU
implementation while holding the Ray GPU share and ``vram_mb``, so admission, queueing and VRAM
accounting are real; their timings are not GPU timings, and every Execution says so
(``extra["emulated_gpu"]``, ``extra["timing_note"]``). A local instance then declares
``emulated_gpus`` fake GPUs; a joined cluster must declare them (``ray start --num-gpus 1``).

Ray is imported lazily (the ``[ray]`` extra): importing this module does not need it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.local import _call_tool, _is_oom, _one_line, quiet_loading
from agentsched.testbeds.rules import Dispatcher, Infeasible

log = logging.getLogger(__name__)

ToolFactory = Callable[..., Any]  # (name, size, seed=...) -> an unloaded Tool; must pickle (Ray ships it)

NAMESPACE = "agentsched"  # Ray namespace of the testbed's named actors
GPU_SHARE = 0.01  # GPU fraction a GPU lease requests: the GPU is shared, VRAM (vram_mb) is the real limit
VRAM_RESOURCE = "vram_mb"  # custom resource: MB of GPU memory a node offers
DEFAULT_EMULATED_VRAM_MB = 24_564.0  # an emulated GPU without a workflow budget: one RTX A5500 (24 GB)
DEFAULT_TIMEOUT_S = 3600.0  # longest one run may take before it ends as error (never a hang)
# A local instance keeps idle worker processes an hour (Ray's default: 1 s above one per CPU): each
# running lease blocks one, and starting one on demand costs a second or more inside a timeline.
WORKER_SYSTEM_CONFIG = {"idle_worker_killing_time_threshold_ms": 3_600_000}
LEASE_RETRIES = 3  # Ray re-runs a lease whose worker or node died this many times
EMULATED_NOTE = ("emulated GPU: GPU placements ran their CPU implementation while holding a Ray GPU share "
                 "and vram_mb; timings are not GPU timings")


def ray_installed() -> bool:
    """True when the ``[ray]`` extra is importable."""
    return importlib.util.find_spec("ray") is not None


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise TestbedError(f"the ray testbed needs the ray extra (pip install 'agentsched[ray]'): {e}") from None
    return ray


# ---- worker side: runs inside Ray actors and tasks --------------------------------------------------
def _set_torch_threads(n: int | None) -> None:
    if n is not None:
        try:
            import torch

            torch.set_num_threads(n)
        except ImportError:
            pass


class _ToolHost:
    """One per node (a Ray actor): the node's loaded tools, kept across runs.

    Keys: ``(base, "cpu")`` a host tool shared by the node's cpu tasks (as the local testbed shares
    one); ``(base, "gpu", task)`` a gpu_now task's own instance: on the GPU (``resident``), on the host
    and moved to the GPU while it runs (``staged``, under a VRAM budget), or on the host (emulated)."""

    def __init__(self, factory: ToolFactory, size: str, seed: int, gpu_device: str,
                 torch_threads: int | None) -> None:
        self.factory, self.size, self.seed = factory, size, seed
        self.gpu_device = gpu_device  # "cuda", or "cpu" when GPUs are emulated
        self.user_tools: dict[str, Any] = {}  # import path -> the user's Tool class or instance
        self.tools: dict[tuple[str, ...], Any] = {}
        self.lock = threading.Lock()  # warm() and concurrent run()s share ``tools``
        _set_torch_threads(torch_threads)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def warm(self, needs: list[tuple[tuple[str, ...], str]], user_tools: dict[str, Any]
             ) -> tuple[tuple[str, ...], bool, str] | None:
        """Load each ``(key, device)`` needed by the next run; unload cached tools it does not use.
        Returns None, or the first tool that failed to load: (key, out of memory?, one-line reason)."""
        with self.lock:
            self.user_tools.update(user_tools)
            keep = {k for k, _ in needs}
            for k in [k for k in self.tools if k not in keep]:
                self.tools.pop(k).unload()
            for key, device in needs:
                try:
                    if key not in self.tools:
                        self.tools[key] = _build(key[0], self.user_tools, self.factory, self.size, self.seed)
                    with quiet_loading():
                        self.tools[key].load(device)
                except Exception as exc:  # noqa: BLE001 - reported to the driver as the run's failure
                    return key, _is_oom(exc), _one_line(exc)
        return None

    def run(self, key: tuple[str, ...], k: int, staged: bool, inputs: dict[str, Any]) -> dict[str, Any]:
        """Call the tool ``k`` times on ``inputs``; wall-clock start/end (``time.time``: comparable
        across nodes) and the last call's output."""
        with self.lock:
            tool = self.tools.get(key)
        if tool is None:  # a node that joined after the warm-up
            raise TestbedError(f"tool {key[0]} is not loaded on node {self.node()[:8]}")
        out = None
        start = time.time()
        try:
            if staged:
                tool.move(self.gpu_device)
            for _ in range(k):
                out = _call_tool(tool, inputs)
                tool.sync()
            end = time.time()
        finally:
            if staged and getattr(tool, "loaded", True):
                tool.move("cpu")
        return {"start_s": start, "end_s": end, "load_ms": 0.0, "node": self.node(), "output": out}

    def unload_all(self) -> None:
        with self.lock:
            for t in self.tools.values():
                t.unload()
            self.tools.clear()


class _QueueWorker:
    """One per GPU (a Ray actor, ``max_concurrency=1``): runs admitted gpu_queue tasks one at a time,
    loading the tool's model when the task is admitted and unloading it after."""

    def __init__(self, factory: ToolFactory, size: str, seed: int, gpu_device: str,
                 torch_threads: int | None) -> None:
        self.factory, self.size, self.seed = factory, size, seed
        self.gpu_device = gpu_device  # "cuda", or "cpu" when GPUs are emulated
        self.tools: dict[str, Any] = {}  # base -> unloaded instance (building one is cheap; loading is not)
        _set_torch_threads(torch_threads)

    def run(self, base: str, k: int, inputs: dict[str, Any], user_tool: Any) -> dict[str, Any]:
        import ray

        if base not in self.tools:
            self.tools[base] = _build(base, {base: user_tool} if user_tool is not None else {}, self.factory,
                                      self.size, self.seed)
        tool = self.tools[base]
        out = None
        start = time.time()
        try:
            with quiet_loading():
                tool.load(self.gpu_device)
            tool.sync()
            load_ms = (time.time() - start) * 1000
            for _ in range(k):
                out = _call_tool(tool, inputs)
                tool.sync()
            end = time.time()
        finally:
            tool.unload()
        return {"start_s": start, "end_s": end, "load_ms": load_ms,
                "node": ray.get_runtime_context().get_node_id(), "output": out}


def _lease(prefix: str, kind: str, key: tuple[str, ...], k: int, staged: bool, inputs: dict[str, Any],
           user_tool: Any) -> tuple[dict[str, Any], Any]:
    """A Ray task holding one placement's resources while its node's actor runs the tool. ``inputs``:
    the invocation's arguments, or ``{pred: ObjectRef of its output}`` (resolved here, on this node).
    Returns (timings, output): two objects, so the driver fetches the timings alone."""
    import ray

    refs = [v for v in inputs.values() if isinstance(v, ray.ObjectRef)]
    if refs:
        got = dict(zip([k_ for k_, v in inputs.items() if isinstance(v, ray.ObjectRef)], ray.get(refs), strict=True))
        inputs = {**inputs, **got}
    node = ray.get_runtime_context().get_node_id()
    if kind == "queue":
        gpu_ids = ray.get_gpu_ids()
        index = int(gpu_ids[0]) if gpu_ids else 0
        try:
            actor = ray.get_actor(f"{prefix}-queue-{node}-{index}", namespace=NAMESPACE)
        except ValueError:
            actor = ray.get_actor(f"{prefix}-queue-{node}-0", namespace=NAMESPACE)
        d = ray.get(actor.run.remote(key[0], k, inputs, user_tool))
    else:
        actor = ray.get_actor(f"{prefix}-host-{node}", namespace=NAMESPACE)
        d = ray.get(actor.run.remote(key, k, staged, inputs))
    out = d.pop("output")
    return d, out


def _build(base: str, user_tools: dict[str, Any], factory: ToolFactory, size: str, seed: int) -> Any:
    """A new, unloaded tool: a user tool (import path: a new instance of its class, or a copy of the
    instance given), else a built-in tool from the factory."""
    obj = user_tools.get(base)
    with quiet_loading():
        if obj is None:
            return factory(base, size, seed=seed)
        return obj() if isinstance(obj, type) else obj


def _idle(seconds: float) -> None:
    """A no-op task: holds a worker process for a moment so that Ray starts enough of them."""
    time.sleep(seconds)


_REMOTE: dict[str, Any] = {}


def _remote(name: str) -> Any:
    """The Ray-wrapped worker-side classes and function (wrapped once, after Ray is imported)."""
    if not _REMOTE:
        ray = _ray()
        _REMOTE["host"] = ray.remote(_ToolHost)
        _REMOTE["queue"] = ray.remote(_QueueWorker)
        _REMOTE["lease"] = ray.remote(_lease)
        _REMOTE["idle"] = ray.remote(_idle)
    return _REMOTE[name]


# ---- driver side -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node as the testbed sees it."""

    node_id: str
    cpus: float
    gpus: float
    vram_mb: float


@dataclass
class _Invocation:
    """Bookkeeping of one execution among those running at once."""

    disp: Dispatcher
    ready_at: dict[str, float]
    starts_at: dict[str, float] = field(default_factory=dict)
    ends_at: dict[str, float] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)
    vram_of: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    vram_timeline: list[tuple[float, float]] = field(default_factory=lambda: [(0.0, 0.0)])
    peak: float = 0.0
    failure: tuple[Status, str, str, float] | None = None  # status, message, task, needed MB
    fail_ms: float | None = None
    in_flight: set[str] = field(default_factory=set)
    out_refs: dict[str, Any] = field(default_factory=dict)  # task -> ObjectRef of its output

    @property
    def over(self) -> bool:
        return self.failure is not None or self.disp.finished


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


class RayTestbed(Testbed):
    """Real execution on a Ray cluster: a local instance, or a running cluster (``address``)."""

    name = "ray"
    deterministic = False

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
        from agentsched.tools.base import parse_size

        _ray()  # a one-line error now when the extra is missing
        self.address = address or None  # None: start a local instance; "auto" or host:port: join a cluster
        self.size = parse_size(size).value  # tool scale: small or paper
        self.seed = seed  # seed of every tool's weights and inputs
        self.emulate_gpu = emulate_gpu  # GPU placements run on the CPU, holding the GPU share and vram_mb
        if emulated_gpus < 1:
            raise TestbedError(f"ray testbed: emulated_gpus must be >= 1, got {emulated_gpus}")
        self.emulated_gpus = emulated_gpus  # fake GPUs a local instance declares when emulating
        if cpu_slots is not None and cpu_slots < 1:
            raise TestbedError(f"ray testbed: cpu_slots must be >= 1, got {cpu_slots}")
        self.cpu_slots = cpu_slots  # Dispatcher CPU cap (None: the cluster's CPUs); local instance's CPUs
        self.vram_mb = vram_mb  # vram_mb a local instance declares (None: GPUs' memory or workflow budget)
        if not timeout_s > 0:
            raise TestbedError(f"ray testbed: timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s  # a run longer than this ends as error
        self.torch_threads = torch_threads  # torch threads in the tool actors (None: torch's default)
        if tool_factory is None:
            from agentsched.tools import get_tool, tools_installed

            if not tools_installed():
                raise TestbedError("the ray testbed needs the tools extra: pip install 'agentsched[tools]'")
            tool_factory = get_tool
        self._factory = tool_factory
        self._prefix = f"agentsched-{uuid.uuid4().hex[:10]}"  # this testbed's actors' names
        self._started_local = False  # this testbed started the Ray instance (and shuts it down)
        self._local_vram_mb: float | None = None  # what the local instance declared
        self._workers_started: dict[str, int] = {}  # lease worker processes started before a clock (Ray keeps them)
        self._actors: dict[str, tuple[str, Any]] = {}  # actor name -> (node id, handle), kept alive here

    # ---- cluster -----------------------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return self.emulate_gpu

    def _local_vram(self, workflow: Workflow | None) -> float:
        """vram_mb of a local instance: given, else the GPUs' memory, else the workflow's budget."""
        if self.vram_mb is not None:
            return float(self.vram_mb)
        if not self.emulate_gpu:
            total = _cuda_memory_mb()
            if total:
                return total
        if workflow is not None and workflow.vram_budget_mb is not None:
            return float(workflow.vram_budget_mb)
        return DEFAULT_EMULATED_VRAM_MB

    def connect(self, workflow: Workflow | None = None) -> None:
        """Join the cluster, or start the local instance (restarted when an emulated workflow's budget
        changes the vram_mb it must declare)."""
        ray = _ray()
        if self.address is None:
            want = self._local_vram(workflow)
            if self._started_local and self._local_vram_mb is not None and abs(want - self._local_vram_mb) > 1e-6:
                log.info("restarting the local Ray instance to declare vram_mb=%g", want)
                self._shutdown()
            if ray.is_initialized():
                return  # this process already joined Ray (a test's cluster, a user's ray.init)
            gpus = self.emulated_gpus if self.emulate_gpu else None
            res = {VRAM_RESOURCE: want} if (self.emulate_gpu or _cuda_memory_mb()) else {}
            ray.init(num_cpus=self.cpu_slots or os.cpu_count() or 1, num_gpus=gpus, resources=res,
                     namespace=NAMESPACE, include_dashboard=False, logging_level=logging.ERROR,
                     log_to_driver=False, configure_logging=True, _system_config=WORKER_SYSTEM_CONFIG)
            self._started_local, self._local_vram_mb = True, want
        elif not ray.is_initialized():
            try:
                ray.init(address=self.address, namespace=NAMESPACE, logging_level=logging.ERROR,
                         log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise TestbedError(f"cannot join the Ray cluster at {self.address}: {_one_line(e)}") from None

    def nodes(self) -> list[NodeInfo]:
        """The alive nodes and what each offers."""
        out = []
        for n in _ray().nodes():
            if n.get("Alive"):
                r = n.get("Resources", {})
                out.append(NodeInfo(n["NodeID"], r.get("CPU", 0.0), r.get("GPU", 0.0), r.get(VRAM_RESOURCE, 0.0)))
        return out

    def _check_gpu(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        cards = workflow.task_cards
        on_gpu = [t for t in workflow.task_ids if mapping[t] is not Mode.CPU and cards[t].has_gpu]
        if not on_gpu:
            return
        t = on_gpu[0]
        nodes = self.nodes()
        if not any(n.gpus > 0 for n in nodes):
            hint = ("declare fake GPUs on the nodes (ray start --num-gpus 1 --resources '{\"vram_mb\": MB}')"
                    if self.emulate_gpu else "use --emulate-gpu, --testbed sim, or map every task to cpu")
            raise TestbedError(f"task {t} ({workflow.tasks[t].tool_label}) is mapped to {mapping[t].value} but "
                               f"no node of the Ray cluster has a GPU: {hint}")
        if not any(n.vram_mb > 0 for n in nodes if n.gpus > 0):
            raise TestbedError("the Ray cluster's GPU nodes declare no vram_mb resource "
                               "(ray start --resources '{\"vram_mb\": MB}'): GPU tasks could never be placed")
        if not self.emulate_gpu and not _cuda_memory_mb() and self.address is None:
            raise TestbedError(f"task {t} ({workflow.tasks[t].tool_label}) is mapped to {mapping[t].value} but "
                               "this machine has no CUDA GPU: use --emulate-gpu, --testbed sim, or map every task "
                               "to cpu")

    def preflight(self, workflow: Workflow) -> None:
        """Connect, and fail before any run when GPU placements cannot run on the cluster."""
        self.connect(workflow)
        self._check_gpu(workflow, {t: Mode.GPU_NOW for t in workflow.task_ids})

    def _actor(self, kind: str, name: str, node: NodeInfo) -> Any:
        if name not in self._actors:
            _ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            gpu_side = not self.emulate_gpu and node.gpus > 0
            device = "cuda" if gpu_side else "cpu"
            opts: dict[str, Any] = dict(
                name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0,
                num_gpus=GPU_SHARE if gpu_side else 0,  # a real GPU actor must see its GPU
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                max_concurrency=1 if kind == "queue" else 1000, max_restarts=0)
            handle = _remote(kind).options(**opts).remote(self._factory, self.size, self.seed, device,
                                                          self.torch_threads)
            self._actors[name] = (node.node_id, handle)
        return self._actors[name][1]

    def _hosts(self, nodes: list[NodeInfo]) -> dict[str, Any]:
        return {n.node_id: self._actor("host", f"{self._prefix}-host-{n.node_id}", n) for n in nodes}

    def _queues(self, nodes: list[NodeInfo]) -> None:
        for n in nodes:
            for i in range(int(n.gpus)):
                self._actor("queue", f"{self._prefix}-queue-{n.node_id}-{i}", n)

    def _drop_dead_actors(self, nodes: list[NodeInfo]) -> None:
        alive = {n.node_id for n in nodes}
        for name in [a for a, (nid, _) in self._actors.items() if nid not in alive]:
            self._actors.pop(name)

    def _shutdown(self) -> None:
        ray = _ray()
        self._actors.clear()
        if ray.is_initialized():
            ray.shutdown()
        self._started_local, self._local_vram_mb = False, None

    def close(self) -> None:
        """Unload the tools, end the testbed's actors; shut down the local instance it started."""
        ray = _ray()
        if ray.is_initialized():
            for _, a in list(self._actors.values()):
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001 - an actor already gone (its node died)
                    pass
        self._actors.clear()
        if self._started_local:
            self._shutdown()

    # ---- tools -------------------------------------------------------------------------------------
    @staticmethod
    def _base_and_k(workflow: Workflow, task: str) -> tuple[str, int]:
        from agentsched.model.tool import is_tool_path
        from agentsched.tools import parse_tool_name

        t = workflow.tasks[task]
        if is_tool_path(t.tool):  # a user tool: repeat is its only amplification
            return t.tool, t.repeat
        base, k = parse_tool_name(t.tool)
        return base, k * t.repeat

    def _user_tools(self, bases: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
        """Import path -> the user's Tool class or instance, shipped to the actors (pickled: a class
        by reference when importable there, else by value; an instance as a copy per node)."""
        from agentsched.model.tool import is_tool_path, resolve_tool

        return {b: resolve_tool(b) for b, _ in bases.values() if is_tool_path(b)}

    def _plan(self, workflow: Workflow, mapping: Mapping[str, Mode], disp: Dispatcher
              ) -> tuple[dict[str, tuple[str, ...]], list[tuple[tuple[str, ...], str]], bool]:
        """Per task its tool key, the host actors' warm list, and whether gpu_now is staged."""
        real_gpu = not self.emulate_gpu
        staged = real_gpu and workflow.vram_budget_mb is not None  # as the local testbed stages
        keys: dict[str, tuple[str, ...]] = {}
        needs: list[tuple[tuple[str, ...], str]] = []
        for t in workflow.task_ids:
            base = self._base_and_k(workflow, t)[0]
            mode = disp.mapping[t]  # where it really runs (host-only tools on a GPU mode: cpu)
            if mode is Mode.CPU:
                keys[t] = (base, "cpu")
                needs.append((keys[t], "cpu"))
            elif mode is Mode.GPU_NOW:
                keys[t] = (base, "gpu", t)
                needs.append((keys[t], "cuda" if real_gpu and not staged else "cpu"))
            else:
                keys[t] = (base, "queue")
        return keys, list(dict.fromkeys(needs)), staged

    # ---- run ---------------------------------------------------------------------------------------
    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
            inputs: Mapping[str, Any] | None = None) -> Execution:
        """Execute once on the cluster (``rng`` is unused: the noise is the cluster's own). ``inputs``:
        the invocation's arguments, given to every source task (None: none, outputs not kept)."""
        return self.run_concurrent(workflow, mapping, 1, inputs=inputs).executions[0]

    def run_concurrent(self, workflow: Workflow, mapping: Mapping[str, Mode], k: int, *,
                       inputs: Mapping[str, Any] | None = None) -> ConcurrentResult:
        """Run ``k`` invocations of one workflow at once across the cluster; each keeps its own start
        rules (its own Dispatcher and VRAM budget) while Ray places all of them on the nodes."""
        if k < 1:
            raise TestbedError(f"concurrency must be >= 1, got {k}")
        mapping = validate_mapping(workflow, mapping)
        self.connect(workflow)
        self._check_gpu(workflow, mapping)
        cards = workflow.task_cards
        nodes = self.nodes()
        self._drop_dead_actors(nodes)
        cpu_slots = self.cpu_slots or max(1, int(sum(n.cpus for n in nodes)))
        invs = [_Invocation(Dispatcher(workflow, mapping, cards, cpu_slots=cpu_slots),
                            {t: 0.0 for t in workflow.task_ids if not workflow.preds[t]}) for _ in range(k)]
        keys, needs, staged = self._plan(workflow, mapping, invs[0].disp)
        bases = {t: self._base_and_k(workflow, t) for t in workflow.task_ids}
        user_tools = self._user_tools(bases)
        too_big = self._unplaceable(workflow, invs[0].disp, nodes)
        if too_big is not None:
            return ConcurrentResult(tuple(self._failed_before_start(workflow, mapping, *too_big)
                                          for _ in range(k)), 0.0)
        # warm models on every node before the clock starts (any node may get any task)
        ray = _ray()
        hosts = self._hosts(nodes)
        if any(m is Mode.GPU_QUEUE for m in invs[0].disp.mapping.values()):
            self._queues([n for n in nodes if n.gpus > 0])
        try:
            failures = [f for f in ray.get([h.warm.remote(needs, user_tools) for h in hosts.values()],
                                           timeout=self.timeout_s) if f is not None]
        except Exception as exc:  # noqa: BLE001 - a node lost or too slow while loading
            failures = [((workflow.task_ids[0],), False, f"loading the tools on the Ray cluster failed: "
                                                         f"{_one_line(getattr(exc, 'cause', None) or exc)}")]
        self._start_workers(invs[0].disp.mapping, k, nodes, cpu_slots)
        if failures:
            key, oom, reason = failures[0]
            task = next((t for t in workflow.task_ids if keys[t] == key), workflow.task_ids[0])
            msg = (f"task {task} ({cards[task].name}): "
                   + ("out of memory while loading: " if oom else "failed to load: ") + reason)
            return ConcurrentResult(tuple(self._failed_before_start(
                workflow, mapping, Status.OOM if oom else Status.ERROR, msg, task) for _ in range(k)), 0.0)
        return self._execute(workflow, mapping, invs, keys, bases, staged, user_tools, inputs)

    def _start_workers(self, modes: Mapping[str, Mode], k: int, nodes: list[NodeInfo], cpu_slots: int) -> None:
        """Start, before the clock, as many lease worker processes of each kind as can run at once
        (host ones; GPU ones, which Ray keeps apart because they hold a GPU share): Ray starts one per
        concurrent task on demand, at a second or more each, which would land in the first timeline."""
        cpu_tasks = sum(m is Mode.CPU for m in modes.values())
        gpu = [("gpu", {"num_cpus": 0, "num_gpus": GPU_SHARE}, (len(modes) - cpu_tasks) * k)] \
            if any(nd.gpus > 0 for nd in nodes) else []
        todo = [(kind, opts, n + len(nodes) - 1)  # SPREAD's shares of the nodes differ by one at most
                for kind, opts, n in [("host", {"num_cpus": 0}, min(cpu_tasks * k, cpu_slots)), *gpu]
                if n > 0 and self._workers_started.get(kind, 0) < n + len(nodes) - 1]
        if not todo:
            return
        ray = _ray()
        idle = _remote("idle")
        ray.get([idle.options(scheduling_strategy="SPREAD", **opts).remote(0.3)
                 for _, opts, n in todo for _ in range(n)], timeout=self.timeout_s)
        for kind, _, n in todo:
            self._workers_started[kind] = n

    def _unplaceable(self, workflow: Workflow, disp: Dispatcher, nodes: list[NodeInfo]
                     ) -> tuple[Status, str, str] | None:
        """A GPU task that no node could ever hold (Ray would wait forever): an error, not a hang."""
        gpu_nodes = [n for n in nodes if n.gpus > 0]
        for t in workflow.task_ids:
            if disp.mapping[t] is Mode.CPU:
                continue
            need = disp.vram_of(t)
            budget = workflow.vram_budget_mb
            if budget is not None and need > budget + 1e-9:
                continue  # the Dispatcher reports it as oom, as every testbed does
            if not any(n.vram_mb + 1e-9 >= need for n in gpu_nodes):
                most = max((n.vram_mb for n in gpu_nodes), default=0.0)
                return (Status.ERROR, f"task {t} ({workflow.task_cards[t].name}) needs {need:g} MB but no Ray "
                        f"node offers that much vram_mb (largest {most:g} MB)", t)
        return None

    def _extra(self, **more: Any) -> dict[str, Any]:
        extra: dict[str, Any] = {"size": self.size, "ray_address": self.address or "local",
                                 "emulated_gpu": self.emulate_gpu}
        if self.emulate_gpu:
            extra["timing_note"] = EMULATED_NOTE
        extra.update(more)
        return extra

    def _failed_before_start(self, workflow: Workflow, mapping: Mapping[str, Mode], status: Status,
                             message: str, task: str) -> Execution:
        return Execution(status=status, mapping=dict(mapping), e2e_ms=None, elapsed_ms=0.0, peak_vram_mb=0.0,
                         spans=(), message=message, testbed=self.name, extra=self._extra(failed_task=task))

    def _lease_options(self, mode: Mode, vram_mb: float) -> dict[str, Any]:
        opts: dict[str, Any] = {"scheduling_strategy": "SPREAD", "max_retries": LEASE_RETRIES}
        if mode is Mode.CPU:
            opts["num_cpus"] = 1
        else:
            opts.update(num_cpus=0, num_gpus=GPU_SHARE)
            if vram_mb > 0:
                opts["resources"] = {VRAM_RESOURCE: vram_mb}
        return opts

    def _execute(self, workflow: Workflow, mapping: dict[str, Mode], invs: list[_Invocation],
                 keys: dict[str, tuple[str, ...]], bases: dict[str, tuple[str, int]], staged: bool,
                 user_tools: dict[str, Any], inputs: Mapping[str, Any] | None) -> ConcurrentResult:
        ray = _ray()
        cards = workflow.task_cards
        lease = _remote("lease")
        pending: dict[Any, tuple[int, str]] = {}  # ObjectRef -> (invocation, task)
        args = dict(inputs or {})
        t0 = time.time()
        deadline = t0 + self.timeout_s

        def ms(at: float) -> float:
            return (at - t0) * 1000

        def submit(i: int) -> None:
            inv = invs[i]
            if inv.failure is not None:
                return
            decision = inv.disp.poll()
            if isinstance(decision, Infeasible):
                inv.failure = (Status.OOM, decision.message, decision.task, decision.needed_mb)
                inv.fail_ms = ms(time.time())
                return
            now = ms(time.time())
            for st in decision:
                kind = "queue" if st.mode is Mode.GPU_QUEUE else "host"
                preds = workflow.preds[st.task]
                task_inputs = {p: inv.out_refs[p] for p in preds} if preds else args
                base = bases[st.task][0]
                ref, out = lease.options(num_returns=2, **self._lease_options(st.mode, st.vram_mb)).remote(
                    self._prefix, kind, keys[st.task], bases[st.task][1], staged and st.mode is Mode.GPU_NOW,
                    task_inputs, user_tools.get(base) if kind == "queue" else None)
                pending[ref] = (i, st.task)
                inv.out_refs[st.task] = out
                inv.order.append(st.task)
                inv.in_flight.add(st.task)
                inv.starts_at[st.task] = now
                inv.vram_of[st.task] = st.vram_mb
            if decision:
                if inv.disp.vram_in_use_mb != inv.vram_timeline[-1][1]:
                    inv.vram_timeline.append((now, inv.disp.vram_in_use_mb))
                inv.peak = max(inv.peak, inv.disp.vram_in_use_mb)

        for i in range(len(invs)):
            submit(i)
        timed_out = False
        while pending:
            left = deadline - time.time()
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(left, 0.0))
            if not done:
                timed_out = True
                break
            more, _ = ray.wait([r for r in pending if r not in done], num_returns=len(pending) - len(done),
                               timeout=0)
            observed = time.time()
            finished: dict[int, list[tuple[str, dict[str, Any]]]] = {}
            for ref in [*done, *more]:
                i, task = pending.pop(ref)
                inv = invs[i]
                inv.in_flight.discard(task)
                try:
                    d = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a tool raised, or Ray lost the task's node
                    if inv.failure is None:
                        inv.failure = self._failure(exc, task, cards[task].name, inv.disp.vram_in_use_mb)
                        inv.fail_ms = ms(observed)
                    continue
                finished.setdefault(i, []).append((task, d))
            for i, done_tasks in finished.items():
                inv = invs[i]
                for task, d in sorted(done_tasks, key=lambda x: x[1]["end_s"]):
                    submitted = t0 + inv.starts_at[task] / 1000
                    start = min(max(d["start_s"], submitted), observed)  # clamped: node clocks may differ
                    end = min(max(d["end_s"], start), observed)
                    inv.starts_at[task], inv.ends_at[task] = ms(start), ms(end)
                    inv.loads[task] = d["load_ms"]
                    inv.nodes[task] = d["node"]
                    if inv.failure is not None:
                        continue  # the run already failed: record the span, start nothing
                    for nt in inv.disp.finish(task):
                        inv.ready_at[nt] = inv.ends_at[task]
                    if inv.disp.vram_in_use_mb != inv.vram_timeline[-1][1]:
                        inv.vram_timeline.append((inv.ends_at[task], inv.disp.vram_in_use_mb))
            for i in finished:
                submit(i)
        wall_s = time.time() - t0
        if timed_out:
            for ref, (i, task) in pending.items():
                inv = invs[i]
                if inv.failure is None:
                    inv.failure = (Status.ERROR, f"timed out after {self.timeout_s:g} s waiting for task {task} "
                                   f"({cards[task].name}) on the Ray cluster", task, 0.0)
                    inv.fail_ms = ms(time.time())
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already finished or its node is gone
                    pass
        return ConcurrentResult(tuple(self._record(workflow, mapping, inv, inputs is not None) for inv in invs),
                                wall_s)

    def _failure(self, exc: BaseException, task: str, tool: str, held_mb: float) -> tuple[Status, str, str, float]:
        cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the tool's own exception
        if _is_oom(cause):
            return Status.OOM, f"task {task} ({tool}): CUDA out of memory: {_one_line(cause)}", task, held_mb
        return Status.ERROR, f"task {task} ({tool}) failed on the Ray cluster: {_one_line(cause)}", task, 0.0

    def _record(self, workflow: Workflow, mapping: dict[str, Mode], inv: _Invocation, keep: bool) -> Execution:
        """The Execution of one invocation; its outputs fetched only when the run was given inputs."""
        cards = workflow.task_cards
        outputs: dict[str, Any] = {}
        if keep and inv.ends_at:
            done = [t for t in inv.order if t in inv.ends_at]
            outputs = dict(zip(done, _ray().get([inv.out_refs[t] for t in done]), strict=True))
        extra = self._extra(nodes={t: n[:12] for t, n in inv.nodes.items()})
        spans = tuple(
            TaskSpan(task=t, tool=cards[t].name, mode=mapping[t], ready_ms=inv.ready_at.get(t, inv.starts_at[t]),
                     start_ms=inv.starts_at[t], end_ms=inv.ends_at.get(t), load_ms=inv.loads.get(t, 0.0),
                     vram_mb=inv.vram_of.get(t, 0.0))
            for t in inv.order
        )
        if inv.failure is not None:
            status, message, task, needed = inv.failure
            return Execution(status=status, mapping=dict(mapping), e2e_ms=None, elapsed_ms=inv.fail_ms or 0.0,
                             peak_vram_mb=max(inv.peak, needed), spans=spans,
                             vram_timeline=tuple(inv.vram_timeline), message=message, testbed=self.name,
                             extra={**extra, "failed_task": task}, outputs=outputs)
        e2e = max(inv.ends_at[t] for t in workflow.sinks)
        return Execution(status=Status.OK, mapping=dict(mapping), e2e_ms=e2e, elapsed_ms=e2e, peak_vram_mb=inv.peak,
                         spans=spans, vram_timeline=tuple(inv.vram_timeline), testbed=self.name, extra=extra,
                         outputs=outputs)


def _cuda_memory_mb() -> float:
    """Total memory of this machine's CUDA GPUs (MB); 0 without CUDA or torch."""
    try:
        import torch
    except ImportError:
        return 0.0
    if not torch.cuda.is_available():
        return 0.0
    return sum(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())) / 2**20


def emulation_note(testbed: Testbed) -> str | None:
    """The line every output of an emulated-GPU run carries; None for any other testbed."""
    return EMULATED_NOTE if isinstance(testbed, RayTestbed) and testbed.emulate_gpu else None
