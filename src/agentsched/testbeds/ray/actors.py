"""The worker side of the ray testbed: what runs inside Ray actors and tasks on the cluster's nodes.

``ToolHost`` (one actor per node) keeps the node's loaded tools across runs; ``QueueWorker`` (one
actor per GPU, ``max_concurrency=1``) runs admitted gpu_queue tasks one at a time; ``lease`` is the
Ray task that holds one placement's resources while its node's actor runs the tool.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agentsched.errors import TestbedError
from agentsched.testbeds.failures import is_oom
from agentsched.testbeds.ray.placement import NAMESPACE
from agentsched.testbeds.real import ToolFactory, call_tool, load_reason, quiet_loading, unload_quietly


def set_torch_threads(n: int | None) -> None:
    if n is not None:
        try:
            import torch

            torch.set_num_threads(n)
        except ImportError:
            pass


class ToolHost:
    """One per node (a Ray actor): the node's loaded tools, kept across runs.

    Keys: ``(base, "cpu")`` a host tool shared by the node's cpu tasks (as the local testbed shares
    one); ``(base, "gpu", task)`` a gpu_now task's own instance: on the GPU (``resident``), on the host
    and moved to the GPU while it runs (``staged``, under a VRAM budget), or on the host (emulated)."""

    def __init__(self, factory: ToolFactory, size: str, seed: int, gpu_device: str, torch_threads: int | None) -> None:
        self.factory, self.size, self.seed = factory, size, seed
        self.gpu_device = gpu_device  # "cuda", or "cpu" when GPUs are emulated
        self.user_tools: dict[str, Any] = {}  # import path -> the user's Tool class or instance
        self.tools: dict[tuple[str, ...], Any] = {}
        self.devices: dict[tuple[str, ...], str] = {}  # where each kept tool was loaded
        self.lock = threading.Lock()  # warm() and concurrent run()s share ``tools``
        set_torch_threads(torch_threads)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def warm(
        self, needs: list[tuple[tuple[str, ...], str]], user_tools: dict[str, Any]
    ) -> tuple[tuple[str, ...], bool, str] | None:
        """Load each ``(key, device)`` needed by the next run; unload cached tools it does not use.
        Returns None, or the first tool that failed to load: (key, out of memory?, one-line reason)."""
        with self.lock:
            self.user_tools.update(user_tools)
            keep = {k for k, _ in needs}
            for k in [k for k in self.tools if k not in keep]:
                self.devices.pop(k, None)
                unload_quietly(self.tools.pop(k), f"tool {k[0]} ({k[1]})")
            for key, device in needs:
                try:
                    tool = self.tools.pop(key, None)  # kept again once loaded: a failed load is never unloaded
                    if tool is not None and self.devices.get(key) == device:
                        self.tools[key] = tool  # warm: load() runs once per instance, not once per run
                        continue
                    if tool is None:
                        tool = build_tool(key[0], self.user_tools, self.factory, self.size, self.seed)
                    self.devices.pop(key, None)
                    with quiet_loading():
                        tool.load(device)
                    self.tools[key] = tool
                    self.devices[key] = device
                except Exception as exc:  # noqa: BLE001 - reported to the driver as the run's failure
                    return key, is_oom(exc), load_reason(exc)
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
            for k, t in self.tools.items():
                unload_quietly(t, f"tool {k[0]} ({k[1]})")
            self.tools.clear()
            self.devices.clear()


class QueueWorker:
    """One per GPU (a Ray actor, ``max_concurrency=1``): runs admitted gpu_queue tasks one at a time,
    loading the tool's model when the task is admitted and unloading it after."""

    def __init__(self, factory: ToolFactory, size: str, seed: int, gpu_device: str, torch_threads: int | None) -> None:
        self.factory, self.size, self.seed = factory, size, seed
        self.gpu_device = gpu_device  # "cuda", or "cpu" when GPUs are emulated
        self.tools: dict[str, Any] = {}  # base -> unloaded instance (building one is cheap; loading is not)
        set_torch_threads(torch_threads)

    def run(self, base: str, k: int, inputs: dict[str, Any], user_tool: Any) -> dict[str, Any]:
        import ray

        if base not in self.tools:
            self.tools[base] = build_tool(
                base, {base: user_tool} if user_tool is not None else {}, self.factory, self.size, self.seed
            )
        tool = self.tools[base]
        out = None
        start = time.time()
        loaded = False  # unloaded after the task only when its load succeeded
        try:
            with quiet_loading():
                tool.load(self.gpu_device)
            loaded = True
            tool.sync()
            load_ms = (time.time() - start) * 1000
            out = call_tool(tool, inputs, k, sync=lambda t: t.sync(), stop=threading.Event())
            end = time.time()
        finally:
            if loaded:
                unload_quietly(tool, f"tool {base} (gpu_queue)")
        return {
            "start_s": start,
            "end_s": end,
            "load_ms": load_ms,
            "node": ray.get_runtime_context().get_node_id(),
            "output": out,
        }


def lease(
    prefix: str, kind: str, key: tuple[str, ...], k: int, staged: bool, inputs: dict[str, Any], user_tool: Any
) -> tuple[dict[str, Any], Any]:
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


def build_tool(base: str, user_tools: dict[str, Any], factory: ToolFactory, size: str, seed: int) -> Any:
    """A new, unloaded tool: a user tool (import path: a new instance of its class, or a copy of the
    instance given), else a built-in tool from the factory."""
    obj = user_tools.get(base)
    with quiet_loading():
        if obj is None:
            return factory(base, size, seed=seed)
        return obj() if isinstance(obj, type) else obj


def idle(seconds: float) -> None:
    """A no-op task: holds a worker process for a moment so that Ray starts enough of them."""
    time.sleep(seconds)
