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
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure, is_oom, one_line
from agentsched.testbeds.local import call_tool, quiet_loading
from agentsched.model.rules import Start

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
# ray.init retries an address whose GCS does not answer without end: a TCP connect bounded by this
# fails first, in one line
CONNECT_TIMEOUT_S = 5.0
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
                    return key, is_oom(exc), one_line(exc)
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
            out = call_tool(tool, inputs, k, sync=lambda t: t.sync(), stop=threading.Event())
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
            out = call_tool(tool, inputs, k, sync=lambda t: t.sync(), stop=threading.Event())
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


def _builtin_tool(name: str, size: str, seed: int = 0) -> Any:
    """A built-in tool (the default factory; a one-line ToolError without the ``[tools]`` extra)."""
    from agentsched.tools import get_tool

    return get_tool(name, size, seed=seed)


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


class _Cluster:
    """The connection and the actors one ray testbed shares among its backends (one backend per
    invocation running at once). Thread-safe: concurrent invocations run on threads."""

    def __init__(self, *, address: str | None, size: str, seed: int, emulate_gpu: bool, emulated_gpus: int,
                 cpu_slots: int | None, vram_mb: float | None, timeout_s: float, torch_threads: int | None,
                 tool_factory: ToolFactory) -> None:
        self.address = address  # None: start a local instance; "auto" or host:port: join a cluster
        self.size, self.seed = size, seed
        self.emulate_gpu = emulate_gpu
        self.emulated_gpus = emulated_gpus
        self.cpu_slots = cpu_slots
        self.vram_mb = vram_mb
        self.timeout_s = timeout_s
        self.torch_threads = torch_threads
        self.factory = tool_factory
        self.prefix = f"agentsched-{uuid.uuid4().hex[:10]}"  # this testbed's actors' names
        self.lock = threading.RLock()
        self.started_local = False  # this testbed started the Ray instance (and shuts it down)
        self.local_vram_mb: float | None = None  # what the local instance declared
        self.workers_started: dict[str, int] = {}  # lease worker processes started, by kind
        self.actors: dict[str, tuple[str, Any]] = {}  # actor name -> (node id, handle), kept alive here

    # ---- connection ----------------------------------------------------------------------------
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
        with self.lock:
            if self.address is None:
                want = self._local_vram(workflow)
                if self.started_local and self.local_vram_mb is not None and abs(want - self.local_vram_mb) > 1e-6:
                    log.info("restarting the local Ray instance to declare vram_mb=%g", want)
                    self.shutdown()
                if ray.is_initialized():
                    return  # this process already joined Ray (a test's cluster, a user's ray.init)
                gpus = self.emulated_gpus if self.emulate_gpu else None
                res = {VRAM_RESOURCE: want} if (self.emulate_gpu or _cuda_memory_mb()) else {}
                ray.init(num_cpus=self.cpu_slots or os.cpu_count() or 1, num_gpus=gpus, resources=res,
                         namespace=NAMESPACE, include_dashboard=False, logging_level=logging.ERROR,
                         log_to_driver=False, configure_logging=True, _system_config=WORKER_SYSTEM_CONFIG)
                self.started_local, self.local_vram_mb = True, want
            elif not ray.is_initialized():
                check_reachable(self.address, CONNECT_TIMEOUT_S)
                try:
                    ray.init(address=self.address, namespace=NAMESPACE, logging_level=logging.ERROR,
                             log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise TestbedError(f"cannot join the Ray cluster at {self.address}: {one_line(e)}") from None

    def nodes(self) -> list[NodeInfo]:
        """The alive nodes and what each offers."""
        out = []
        for n in _ray().nodes():
            if n.get("Alive"):
                r = n.get("Resources", {})
                out.append(NodeInfo(n["NodeID"], r.get("CPU", 0.0), r.get("GPU", 0.0), r.get(VRAM_RESOURCE, 0.0)))
        return out

    def shutdown(self) -> None:
        ray = _ray()
        with self.lock:
            self.actors.clear()
            self.workers_started.clear()
            if ray.is_initialized():
                ray.shutdown()
            self.started_local, self.local_vram_mb = False, None

    def close(self) -> None:
        """End this testbed's actors (their tools unload with them); shut down a local instance it started."""
        ray = _ray()
        with self.lock:
            if ray.is_initialized():
                for _, a in list(self.actors.values()):
                    try:
                        ray.kill(a)
                    except Exception:  # noqa: BLE001 - an actor already gone (its node died)
                        pass
            self.actors.clear()
            if self.started_local:
                self.shutdown()

    # ---- checks --------------------------------------------------------------------------------
    def check_gpu(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        """One-line TestbedError when a GPU placement of ``mapping`` cannot run on the cluster."""
        cards = workflow.task_cards
        on_gpu = [t for t in workflow.task_ids if mapping[t] is not Mode.CPU and cards[t].has_gpu]
        if not on_gpu:
            return
        t = on_gpu[0]
        what = f"task {t} ({workflow.tasks[t].tool_label}) is mapped to {mapping[t].value} but"
        nodes = self.nodes()
        if not any(n.gpus > 0 for n in nodes):
            hint = ("declare fake GPUs on the nodes (ray start --num-gpus 1 --resources '{\"vram_mb\": MB}')"
                    if self.emulate_gpu else "use --emulate-gpu, --testbed sim, or map every task to cpu")
            raise TestbedError(f"{what} no node of the Ray cluster has a GPU: {hint}")
        if not any(n.vram_mb > 0 for n in nodes if n.gpus > 0):
            raise TestbedError("the Ray cluster's GPU nodes declare no vram_mb resource "
                               "(ray start --resources '{\"vram_mb\": MB}'): GPU tasks could never be placed")
        if not self.emulate_gpu and self.address is None and not _cuda_memory_mb():
            raise TestbedError(f"{what} this machine has no CUDA GPU: use --emulate-gpu, --testbed sim, or map "
                               "every task to cpu")

    # ---- actors and workers ----------------------------------------------------------------------
    def _actor(self, kind: str, name: str, node: NodeInfo) -> Any:
        with self.lock:
            if name not in self.actors:
                _ray()
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                gpu_side = not self.emulate_gpu and node.gpus > 0
                opts: dict[str, Any] = dict(
                    name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0,
                    num_gpus=GPU_SHARE if gpu_side else 0,  # a real GPU actor must see its GPU
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                    max_concurrency=1 if kind == "queue" else 1000, max_restarts=0)
                handle = _remote(kind).options(**opts).remote(self.factory, self.size, self.seed,
                                                              "cuda" if gpu_side else "cpu", self.torch_threads)
                self.actors[name] = (node.node_id, handle)
            return self.actors[name][1]

    def hosts(self, nodes: list[NodeInfo]) -> list[Any]:
        """Each node's tool host (created on first use)."""
        alive = {n.node_id for n in nodes}
        with self.lock:
            for name in [a for a, (nid, _) in self.actors.items() if nid not in alive]:
                self.actors.pop(name)  # its node died
        return [self._actor("host", f"{self.prefix}-host-{n.node_id}", n) for n in nodes]

    def queues(self, nodes: list[NodeInfo]) -> None:
        """One serial queue actor per GPU of every GPU node."""
        for n in nodes:
            for i in range(int(n.gpus)):
                self._actor("queue", f"{self.prefix}-queue-{n.node_id}-{i}", n)

    def start_workers(self, modes: Mapping[str, Mode], k: int, nodes: list[NodeInfo], cpu_slots: int) -> None:
        """Start, before the clock, as many lease worker processes of each kind as can run at once
        (host ones; GPU ones, which Ray keeps apart because they hold a GPU share): Ray starts one per
        concurrent task on demand, at a second or more each, which would land in the first timeline."""
        cpu_tasks = sum(m is Mode.CPU for m in modes.values())
        gpu = [("gpu", {"num_cpus": 0, "num_gpus": GPU_SHARE}, (len(modes) - cpu_tasks) * k)] \
            if any(nd.gpus > 0 for nd in nodes) else []
        with self.lock:
            todo = [(kind, opts, n + len(nodes) - 1)  # SPREAD's shares of the nodes differ by one at most
                    for kind, opts, n in [("host", {"num_cpus": 0}, min(cpu_tasks * k, cpu_slots)), *gpu]
                    if n > 0 and self.workers_started.get(kind, 0) < n + len(nodes) - 1]
            if not todo:
                return
            ray = _ray()
            idle = _remote("idle")
            ray.get([idle.options(scheduling_strategy="SPREAD", **opts).remote(0.3)
                     for _, opts, n in todo for _ in range(n)], timeout=self.timeout_s)
            for kind, _, n in todo:
                self.workers_started[kind] = n


class _RunState:
    """One run's state inside a backend (begin .. end)."""

    def __init__(self, workflow: Workflow, modes: Mapping[str, Mode], keys: dict[str, tuple[str, ...]],
                 bases: dict[str, tuple[str, int]], staged: bool, user_tools: dict[str, Any],
                 deadline_s: float) -> None:
        self.workflow = workflow
        self.modes = modes  # where each task really runs (host-only tools on a GPU mode: cpu)
        self.keys, self.bases, self.staged, self.user_tools = keys, bases, staged, user_tools
        self.deadline_s = deadline_s  # wall clock past which the run ends as error
        self.t0 = time.time()  # the clock's zero (wall clock: leases report node wall-clock times)
        self.pending: dict[Any, tuple[str, float]] = {}  # timings ObjectRef -> (task, submitted at)
        self.out_refs: dict[str, Any] = {}  # task -> ObjectRef of its output
        self.nodes: dict[str, str] = {}  # task -> node it ran on

    def ms(self, at: float) -> float:
        return (at - self.t0) * 1000


class RayBackend(Backend):
    """How the ray testbed starts tasks (leases on the cluster) and lets time pass (the wall clock)."""

    name = "ray"
    deterministic = False
    computes_outputs = True

    def __init__(self, cluster: _Cluster) -> None:
        self.cluster = cluster  # connection and actors, shared with the testbed's other backends
        self._cpu_slots = cluster.cpu_slots or 1  # set from the cluster's CPUs at begin()
        self.run: _RunState | None = None

    @property
    def cpu_slots(self) -> int | None:
        return self._cpu_slots

    def preflight(self, workflow: Workflow) -> None:
        """Connect, and fail before any run when GPU placements cannot run on the cluster (a policy
        may place any task there; a caller that knows its mapping uses ``RayTestbed.check_mapping``)."""
        self.cluster.connect(workflow)
        self.cluster.check_gpu(workflow, {t: Mode.GPU_NOW for t in workflow.task_ids})

    # ---- one run -----------------------------------------------------------------------------------
    def begin(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None,
              expected: bool = False) -> Failure | None:
        """Connect, warm the tools on every node, then start the clock (``rng`` is unused)."""
        c = self.cluster
        c.connect(workflow)
        c.check_gpu(workflow, mapping)
        nodes = c.nodes()
        self._cpu_slots = c.cpu_slots or max(1, int(sum(n.cpus for n in nodes)))
        modes = _real_modes(workflow, mapping)
        bases = {t: _base_and_k(workflow, t) for t in workflow.task_ids}
        keys, needs, staged = _plan(workflow, modes, bases, emulated=c.emulate_gpu)
        too_big = _unplaceable(workflow, modes, nodes)
        if too_big is not None:
            return too_big
        user_tools = _user_tools(bases)
        hosts = c.hosts(nodes)  # any node may get any task: warm all, before the clock starts
        if any(m is Mode.GPU_QUEUE for m in modes.values()):
            c.queues([n for n in nodes if n.gpus > 0])
        ray = _ray()
        try:
            failures = [f for f in ray.get([h.warm.remote(needs, user_tools) for h in hosts], timeout=c.timeout_s)
                        if f is not None]
        except Exception as exc:  # noqa: BLE001 - a node lost or too slow while loading
            cause = getattr(exc, "cause", None) or exc
            return Failure(Status.ERROR, workflow.task_ids[0],
                           f"loading the tools on the Ray cluster failed: {one_line(cause)}")
        if failures:
            key, oom, reason = failures[0]
            task = next((t for t in workflow.task_ids if keys[t] == key), workflow.task_ids[0])
            return Failure(Status.OOM if oom else Status.ERROR, task,
                           f"task {task} ({workflow.task_cards[task].name}): "
                           + ("out of memory while loading: " if oom else "failed to load: ") + reason)
        c.start_workers(modes, 1, nodes, self._cpu_slots)
        self.run = _RunState(workflow, modes, keys, bases, staged, user_tools, time.time() + c.timeout_s)
        return None

    def now_ms(self) -> float:
        assert self.run is not None
        return self.run.ms(time.time())

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        """Submit the task's lease; a predecessor's output travels as its ObjectRef (node to node)."""
        r = self.run
        assert r is not None
        t = start.task
        args = {k: r.out_refs.get(k, v) if k in r.workflow.preds[t] else v for k, v in (inputs or {}).items()}
        kind = "queue" if start.mode is Mode.GPU_QUEUE else "host"
        base, k = r.bases[t]
        timings, out = _remote("lease").options(num_returns=2, **_lease_options(start.mode, start.vram_mb)).remote(
            self.cluster.prefix, kind, r.keys[t], k, r.staged and start.mode is Mode.GPU_NOW, args,
            r.user_tools.get(base) if kind == "queue" else None)
        r.pending[timings] = (t, time.time())
        r.out_refs[t] = out

    def wait(self) -> list[Completion]:
        """The next finished leases (their node-reported times, clamped to what the driver saw); a
        lease past the run's deadline is reported as failed, so a lost node never hangs the run."""
        r = self.run
        assert r is not None and r.pending
        ray = _ray()
        done, rest = ray.wait(list(r.pending), num_returns=1, timeout=max(r.deadline_s - time.time(), 0.0))
        if not done:
            task, submitted = next(iter(r.pending.values()))
            now = time.time()
            err = TestbedError(f"timed out after {self.cluster.timeout_s:g} s on the Ray cluster")
            return [Completion(task, r.ms(submitted), r.ms(now), error=err)]
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            done = [*done, *more]
        observed = time.time()
        out: list[Completion] = []
        for ref in done:
            task, submitted = r.pending.pop(ref)
            try:
                d = ray.get(ref)
                output = ray.get(r.out_refs[task])
            except Exception as exc:  # noqa: BLE001 - a tool raised, or Ray lost the task's node
                cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the tool's own exception
                out.append(Completion(task, r.ms(submitted), r.ms(observed), error=_as_exception(cause)))
                continue
            start = min(max(d["start_s"], submitted), observed)  # clamped: node clocks may differ
            end = min(max(d["end_s"], start), observed)
            r.nodes[task] = d["node"]
            out.append(Completion(task, r.ms(start), r.ms(end), d["load_ms"], output))
        return sorted(out, key=lambda c: c.end_ms)

    def abort(self) -> dict[str, float]:
        """Let the run's other leases end (until the deadline), then cancel what is left."""
        r = self.run
        if r is None or not r.pending:
            return {}
        ray = _ray()
        _, left = ray.wait(list(r.pending), num_returns=len(r.pending), timeout=max(r.deadline_s - time.time(), 0))
        for ref in left:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished, or its node is gone
                pass
        r.pending.clear()
        return {}

    def end(self) -> dict[str, Any]:
        """The run's details: where each task ran, and whether GPUs were emulated."""
        r, self.run = self.run, None
        extra: dict[str, Any] = {"size": self.cluster.size, "ray_address": self.cluster.address or "local",
                                 "emulated_gpu": self.cluster.emulate_gpu}
        if self.cluster.emulate_gpu:
            extra["timing_note"] = EMULATED_NOTE
        if r is not None:
            extra["nodes"] = {t: n[:12] for t, n in r.nodes.items()}
        return extra

    def close(self) -> None:
        self.cluster.close()


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

        _ray()  # a one-line error now when the extra is missing
        if emulated_gpus < 1:
            raise TestbedError(f"ray testbed: emulated_gpus must be >= 1, got {emulated_gpus}")
        if cpu_slots is not None and cpu_slots < 1:
            raise TestbedError(f"ray testbed: cpu_slots must be >= 1, got {cpu_slots}")
        if not timeout_s > 0:
            raise TestbedError(f"ray testbed: timeout_s must be > 0, got {timeout_s}")
        if tool_factory is None:
            tool_factory = _builtin_tool  # user tools (import paths) need no tools extra
        self.cluster = _Cluster(address=address or None, size=parse_size(size).value, seed=seed,
                                emulate_gpu=emulate_gpu, emulated_gpus=emulated_gpus, cpu_slots=cpu_slots,
                                vram_mb=vram_mb, timeout_s=timeout_s, torch_threads=torch_threads,
                                tool_factory=tool_factory)
        super().__init__(RayBackend(self.cluster))

    @property
    def size(self) -> str:
        return self.cluster.size

    @property
    def emulate_gpu(self) -> bool:
        return self.cluster.emulate_gpu

    def gpu_available(self, workflow: Workflow | None = None) -> bool:
        """May GPU placements run on the cluster: a node with a GPU and vram_mb, whose GPUs are real
        (a joined cluster's, or this machine's CUDA) or emulated? Connects first."""
        c = self.cluster
        c.connect(workflow)
        if not any(n.gpus > 0 and n.vram_mb > 0 for n in c.nodes()):
            return False
        return c.emulate_gpu or c.address is not None or bool(_cuda_memory_mb())

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

    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
            inputs: Mapping[str, Any] | None = None) -> Execution:
        """Execute once on the cluster (``rng`` is unused: the noise is the cluster's own)."""
        return super().run(workflow, validate_mapping(workflow, mapping), rng=rng, inputs=inputs)

    def run_concurrent(self, workflow: Workflow, mapping: Mapping[str, Mode], k: int, *,
                       inputs: Mapping[str, Any] | None = None) -> ConcurrentResult:
        """Run ``k`` invocations of one workflow at once across the cluster: each on its own thread
        with its own driver and start rules (its own Dispatcher and VRAM budget), all on one Ray
        cluster that places every lease by its resources."""
        if k < 1:
            raise TestbedError(f"concurrency must be >= 1, got {k}")
        mapping = validate_mapping(workflow, mapping)
        c = self.cluster
        c.connect(workflow)
        c.check_gpu(workflow, mapping)
        nodes = c.nodes()
        c.start_workers(_real_modes(workflow, mapping), k, nodes,
                        c.cpu_slots or max(1, int(sum(n.cpus for n in nodes))))
        drivers = [self] + [Driver(RayBackend(c)) for _ in range(k - 1)]
        results: list[Execution | BaseException | None] = [None] * k
        barrier = threading.Barrier(k)

        def one(i: int) -> None:
            try:
                barrier.wait()  # start together
                results[i] = drivers[i].run(workflow, mapping, inputs=inputs)
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


# ---- pure helpers ------------------------------------------------------------------------------------
def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address (``HOST:PORT``, ``[IPv6]:PORT``, ``ray://HOST:PORT``);
    None for ``auto`` or anything without a numeric port (Ray judges those itself)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """One-line TestbedError unless a TCP connection to ``address`` opens within ``timeout_s``
    (a joined cluster's GCS); ``auto`` and addresses without a port are left to Ray."""
    hp = host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            pass
    except OSError as e:
        why = (f"no answer within {timeout_s:g} s" if isinstance(e, socket.timeout)
               else (e.strerror or type(e).__name__).lower())
        raise TestbedError(f"cannot join the Ray cluster at {address}: {why} (is `ray start --head` "
                           "running there? check the host and port)") from None


def _real_modes(workflow: Workflow, mapping: Mapping[str, Mode]) -> dict[str, Mode]:
    """Where each task really runs: a GPU placement of a host-only tool is a CPU task (rules.Dispatcher)."""
    cards = workflow.task_cards
    return {t: (Mode.CPU if m is not Mode.CPU and not cards[t].has_gpu else m) for t, m in mapping.items()}


def _base_and_k(workflow: Workflow, task: str) -> tuple[str, int]:
    """The task's tool (built-in base name, or a user tool's import path) and its calls per run."""
    from agentsched.model.tool import is_tool_path
    from agentsched.tools import parse_tool_name

    t = workflow.tasks[task]
    if is_tool_path(t.tool):  # a user tool: repeat is its only amplification
        return t.tool, t.repeat
    base, k = parse_tool_name(t.tool)
    return base, k * t.repeat


def _user_tools(bases: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """Import path -> the user's Tool class or instance, shipped to the actors (pickled: a class by
    reference when importable there, else by value; an instance as one copy per node)."""
    from agentsched.model.tool import is_tool_path, resolve_tool

    return {b: resolve_tool(b) for b, _ in bases.values() if is_tool_path(b)}


def _plan(workflow: Workflow, modes: Mapping[str, Mode], bases: Mapping[str, tuple[str, int]], *,
          emulated: bool) -> tuple[dict[str, tuple[str, ...]], list[tuple[tuple[str, ...], str]], bool]:
    """Per task its tool key in the actors, the hosts' warm list ``(key, device)``, and whether
    gpu_now tools are staged (host until the task runs, as the local testbed does under a budget)."""
    staged = not emulated and workflow.vram_budget_mb is not None
    keys: dict[str, tuple[str, ...]] = {}
    needs: list[tuple[tuple[str, ...], str]] = []
    for t in workflow.task_ids:
        base = bases[t][0]
        if modes[t] is Mode.CPU:
            keys[t] = (base, "cpu")  # one shared host instance per node
            needs.append((keys[t], "cpu"))
        elif modes[t] is Mode.GPU_NOW:
            keys[t] = (base, "gpu", t)  # the task's own instance
            needs.append((keys[t], "cuda" if not emulated and not staged else "cpu"))
        else:
            keys[t] = (base, "queue")  # loaded by the queue actor at admission
    return keys, list(dict.fromkeys(needs)), staged


def _unplaceable(workflow: Workflow, modes: Mapping[str, Mode], nodes: list[NodeInfo]) -> Failure | None:
    """A GPU task that no node could ever hold (Ray would wait for it forever): an error, not a hang.
    A task larger than the workflow's budget is left to the start rules (oom, as on every testbed)."""
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    cards = workflow.task_cards
    budget = workflow.vram_budget_mb
    for t in workflow.task_ids:
        if modes[t] is Mode.CPU:
            continue
        need = cards[t].vram_needed_mb
        if budget is not None and need > budget + 1e-9:
            continue
        if not any(n.vram_mb + 1e-9 >= need for n in gpu_nodes):
            most = max((n.vram_mb for n in gpu_nodes), default=0.0)
            return Failure(Status.ERROR, t, f"task {t} ({cards[t].name}) needs {need:g} MB but no Ray node offers "
                                            f"that much vram_mb (largest {most:g} MB)")
    return None


def _lease_options(mode: Mode, vram_mb: float) -> dict[str, Any]:
    """What a lease asks Ray for: a CPU, or a GPU share and the task's VRAM."""
    opts: dict[str, Any] = {"scheduling_strategy": "SPREAD", "max_retries": LEASE_RETRIES}
    if mode is Mode.CPU:
        opts["num_cpus"] = 1
    else:
        opts.update(num_cpus=0, num_gpus=GPU_SHARE)
        if vram_mb > 0:
            opts["resources"] = {VRAM_RESOURCE: vram_mb}
    return opts


def _as_exception(cause: Any) -> BaseException:
    return cause if isinstance(cause, BaseException) else TestbedError(str(cause))


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
