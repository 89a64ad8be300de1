"""The ray testbed's connection to a cluster (or the local instance it starts) and the actors it keeps.

Ray is imported lazily (the ``[ray]`` extra): importing this module does not need it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import threading
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

from agentsched.errors import TestbedError, one_line, redact_address
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.ray.actors import QueueWorker, ToolHost, idle, lease
from agentsched.testbeds.ray.placement import GPU_SHARE, NAMESPACE, VRAM_RESOURCE, NodeInfo
from agentsched.testbeds.real import ToolFactory

log = logging.getLogger(__name__)

DEFAULT_EMULATED_VRAM_MB = 24_564.0  # an emulated GPU without a workflow budget: one RTX A5500 (24 GB)
# A local instance keeps idle worker processes an hour (Ray's default: 1 s above one per CPU): each
# running lease blocks one, and starting one on demand costs a second or more inside a timeline.
WORKER_SYSTEM_CONFIG = {"idle_worker_killing_time_threshold_ms": 3_600_000}
# ray.init retries an address whose GCS does not answer without end: a TCP connect bounded by this
# fails first, in one line
CONNECT_TIMEOUT_S = 5.0
WORKER_WARMUP_S = 30.0  # how long the lease workers are waited for before a first run (not a task timeout)
EMULATED_NOTE = (
    "emulated GPU: GPU placements ran their CPU implementation while holding a Ray GPU share "
    "and vram_mb; timings are not GPU timings"
)


def ray_installed() -> bool:
    """True when the ``[ray]`` extra is importable."""
    return importlib.util.find_spec("ray") is not None


def ray_module() -> Any:
    """The ``ray`` package; a one-line TestbedError without the extra."""
    try:
        import ray
    except ImportError as e:
        raise TestbedError(f"the ray testbed needs the ray extra (pip install 'agentsched[ray]'): {e}") from None
    return ray


_REMOTE: dict[str, Any] = {}
# The clusters of this process using a connection to a remote cluster that agentsched opened (not
# the user's own ray.init): the last of them to close disconnects. Why: a runtime closed on a
# joined cluster left the driver connected for the life of the process (a trial's later
# ``Cluster.shutdown()`` then raised), while other testbeds may still be running on it.
_JOINED_BY_US: weakref.WeakSet[Any] = weakref.WeakSet()
_JOINED_LOCK = threading.Lock()
_JOIN_STATE = {"ours": False}


def remote(name: str) -> Any:
    """The Ray-wrapped worker-side classes and function (wrapped once, after Ray is imported)."""
    if not _REMOTE:
        ray = ray_module()
        _REMOTE["host"] = ray.remote(ToolHost)
        _REMOTE["queue"] = ray.remote(QueueWorker)
        _REMOTE["lease"] = ray.remote(lease)
        _REMOTE["idle"] = ray.remote(idle)
    return _REMOTE[name]


class Cluster:
    """The connection and the actors one ray testbed shares among its backends (one backend per
    invocation running at once). Thread-safe: concurrent invocations run on threads."""

    def __init__(
        self,
        *,
        address: str | None,
        size: str,
        seed: int,
        emulate_gpu: bool,
        emulated_gpus: int,
        cpu_slots: int | None,
        vram_mb: float | None,
        timeout_s: float,
        torch_threads: int | None,
        tool_factory: ToolFactory,
    ) -> None:
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
            total = cuda_memory_mb()
            if total:
                return total
        if workflow is not None and workflow.vram_budget_mb is not None:
            return float(workflow.vram_budget_mb)
        return DEFAULT_EMULATED_VRAM_MB

    def connect(self, workflow: Workflow | None = None) -> None:
        """Join the cluster, or start the local instance (restarted when an emulated workflow's budget
        changes the vram_mb it must declare)."""
        ray = ray_module()
        with self.lock:
            if self.address is None:
                want = self._local_vram(workflow)
                if self.started_local and self.local_vram_mb is not None and abs(want - self.local_vram_mb) > 1e-6:
                    log.info("restarting the local Ray instance to declare vram_mb=%g", want)
                    self.shutdown()
                if ray.is_initialized():
                    return  # this process already joined Ray (a test's cluster, a user's ray.init)
                gpus = self.emulated_gpus if self.emulate_gpu else None
                res = {VRAM_RESOURCE: want} if (self.emulate_gpu or cuda_memory_mb()) else {}
                # address="local": always a new instance of our own; without it ray.init joins any
                # cluster running on this machine (RAY_ADDRESS, /tmp/ray) and refuses num_cpus there
                ray.init(
                    address="local",
                    num_cpus=self.cpu_slots or os.cpu_count() or 1,
                    num_gpus=gpus,
                    resources=res,
                    namespace=NAMESPACE,
                    include_dashboard=False,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    configure_logging=True,
                    _system_config=WORKER_SYSTEM_CONFIG,
                )
                self.started_local, self.local_vram_mb = True, want
            else:
                self._join(ray)

    def _join(self, ray: Any) -> None:
        """Join the cluster at ``self.address`` unless this process already has (its own ray.init,
        or another testbed's join: counted, so the last to close disconnects)."""
        with _JOINED_LOCK:
            if not ray.is_initialized():
                check_reachable(self.address, CONNECT_TIMEOUT_S)
                try:
                    ray.init(
                        address=self.address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False
                    )
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise TestbedError(
                        f"cannot join the Ray cluster at {redact_address(self.address)}: {one_line(e)}"
                    ) from None
                _JOIN_STATE["ours"] = True
            if _JOIN_STATE["ours"]:
                _JOINED_BY_US.add(self)

    def _leave(self, ray: Any) -> None:
        """Disconnect when this was the last testbed on a join agentsched made."""
        with _JOINED_LOCK:
            if self not in _JOINED_BY_US:
                return
            _JOINED_BY_US.discard(self)
            if not _JOINED_BY_US and _JOIN_STATE["ours"]:
                _JOIN_STATE["ours"] = False
                if ray.is_initialized():
                    ray.shutdown()

    def nodes(self) -> list[NodeInfo]:
        """The alive nodes and what each offers."""
        out = []
        for n in ray_module().nodes():
            if n.get("Alive"):
                r = n.get("Resources", {})
                out.append(NodeInfo(n["NodeID"], r.get("CPU", 0.0), r.get("GPU", 0.0), r.get(VRAM_RESOURCE, 0.0)))
        return out

    def shutdown(self) -> None:
        ray = ray_module()
        with self.lock:
            self.actors.clear()
            self.workers_started.clear()
            if ray.is_initialized():
                ray.shutdown()
            self.started_local, self.local_vram_mb = False, None

    def close(self) -> None:
        """End this testbed's actors (their tools unload with them); shut down a local instance it started."""
        ray = ray_module()
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
            else:
                self._leave(ray)

    # ---- checks --------------------------------------------------------------------------------
    def check_gpu(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> None:
        """One-line TestbedError when a GPU placement of ``mapping`` cannot run on the cluster."""
        real = effective_mapping(workflow.task_cards, mapping)  # host-only tools on a GPU mode run on a CPU
        on_gpu = [t for t in workflow.task_ids if real[t] is not Mode.CPU]
        if not on_gpu:
            return
        t = on_gpu[0]
        what = f"task {t} ({workflow.tasks[t].tool_label}) is mapped to {mapping[t].value} but"
        nodes = self.nodes()
        if not any(n.gpus > 0 for n in nodes):
            hint = (
                "declare fake GPUs on the nodes (ray start --num-gpus 1 --resources '{\"vram_mb\": MB}')"
                if self.emulate_gpu
                else "use --emulate-gpu, --testbed sim, or map every task to cpu"
            )
            raise TestbedError(f"{what} no node of the Ray cluster has a GPU: {hint}")
        if not any(n.vram_mb > 0 for n in nodes if n.gpus > 0):
            raise TestbedError(
                "the Ray cluster's GPU nodes declare no vram_mb resource "
                "(ray start --resources '{\"vram_mb\": MB}'): GPU tasks could never be placed"
            )
        if not self.emulate_gpu and self.address is None and not cuda_memory_mb():
            raise TestbedError(
                f"{what} this machine has no CUDA GPU: use --emulate-gpu, --testbed sim, or map every task to cpu"
            )

    # ---- actors and workers ----------------------------------------------------------------------
    def _actor(self, kind: str, name: str, node: NodeInfo) -> Any:
        with self.lock:
            if name not in self.actors:
                ray_module()
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                gpu_side = not self.emulate_gpu and node.gpus > 0
                opts: dict[str, Any] = dict(
                    name=name,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    num_cpus=0,
                    num_gpus=GPU_SHARE if gpu_side else 0,  # a real GPU actor must see its GPU
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                    max_concurrency=1 if kind == "queue" else 1000,
                    max_restarts=0,
                )
                handle = (
                    remote(kind)
                    .options(**opts)
                    .remote(self.factory, self.size, self.seed, "cuda" if gpu_side else "cpu", self.torch_threads)
                )
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
        gpu = (
            [("gpu", {"num_cpus": 0, "num_gpus": GPU_SHARE}, (len(modes) - cpu_tasks) * k)]
            if any(nd.gpus > 0 for nd in nodes)
            else []
        )
        with self.lock:
            todo = [
                (kind, opts, n + len(nodes) - 1)  # SPREAD's shares of the nodes differ by one at most
                for kind, opts, n in [("host", {"num_cpus": 0}, min(cpu_tasks * k, cpu_slots)), *gpu]
                if n > 0 and self.workers_started.get(kind, 0) < n + len(nodes) - 1
            ]
            if not todo:
                return
            ray = ray_module()
            idle = remote("idle")
            try:  # a warm-up: never a run's failure (the task timeout is the tools', not this wait's)
                ray.get(
                    [
                        idle.options(scheduling_strategy="SPREAD", **opts).remote(0.3)
                        for _, opts, n in todo
                        for _ in range(n)
                    ],
                    timeout=WORKER_WARMUP_S,
                )
            except Exception as e:  # noqa: BLE001 - a busy cluster, a lost node: workers then start on demand
                log.info("Ray workers not started ahead (%s): they start on demand", one_line(e))
            for kind, _, n in todo:  # tried once: a busy cluster is not made to wait again for every run
                self.workers_started[kind] = n


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address (``HOST:PORT``, ``[IPv6]:PORT``, ``ray://HOST:PORT``);
    None for ``auto`` or anything without a numeric port (Ray judges those itself)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.rpartition("@")[2]  # (credentials before the host are not the host)
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
        why = (
            f"no answer within {timeout_s:g} s"
            if isinstance(e, socket.timeout)
            else (e.strerror or type(e).__name__).lower()
        )
        raise TestbedError(
            f"cannot join the Ray cluster at {redact_address(address)}: {why} (is `ray start --head` "
            "running there? check the host and port)"
        ) from None


def cuda_memory_mb() -> float:
    """Total memory of this machine's CUDA GPUs (MB); 0 without CUDA or torch."""
    try:
        import torch
    except ImportError:
        return 0.0
    if not torch.cuda.is_available():
        return 0.0
    return sum(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())) / 2**20
