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

Ray is imported lazily (the ``[ray]`` extra): importing this package does not need it.

Modules: ``placement`` (what a lease asks for, the plan of a run), ``actors`` (the worker side),
``cluster`` (the connection and the actors), ``backend`` (the driver's ray backend), ``testbed``
(``RayTestbed``, concurrent runs).
"""

from agentsched.testbeds.ray.backend import RayBackend
from agentsched.testbeds.ray.cluster import EMULATED_NOTE, check_reachable, host_port, ray_installed
from agentsched.testbeds.ray.placement import GPU_SHARE, VRAM_RESOURCE, NodeInfo
from agentsched.testbeds.ray.testbed import DEFAULT_TIMEOUT_S, ConcurrentResult, RayTestbed, emulation_note

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "EMULATED_NOTE",
    "GPU_SHARE",
    "VRAM_RESOURCE",
    "ConcurrentResult",
    "NodeInfo",
    "RayBackend",
    "RayTestbed",
    "check_reachable",
    "emulation_note",
    "host_port",
    "ray_installed",
]
