"""The ray testbed's backend: how the driver starts tasks (leases on the cluster) and lets time pass.

Start rules: the shared ``rules.Dispatcher``, exactly as the simulator and the local testbed drive
it (a start that cannot fit the workflow's VRAM budget is an ``oom`` execution). A node that dies
mid-run makes Ray retry the lease elsewhere (``LEASE_RETRIES``) or ends the run as ``error``; every
task's run is bounded by the cluster's ``timeout_s`` (``--task-timeout-s``), measured on its node; the
loading of the tools before the clock (``LOAD_TIMEOUT_S``) and a lease's start-up (``LEASE_START_S``)
have bounds of their own.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping
from typing import Any

from agentsched.errors import TestbedError, one_line
from agentsched.model.execution import Status
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.driver import Backend, Completion, Failure, MachineLost
from agentsched.testbeds.ray.cluster import EMULATED_NOTE, Cluster, ray_module, remote
from agentsched.testbeds.ray.placement import lease_options, plan, resolve_user_tools, unplaceable
from agentsched.testbeds.real import base_and_k, load_failure, task_timeout

# Loading the tools before the clock: its own bound, not the task timeout (a first load may import
# libraries or download a model, which a short --task-timeout-s would fail while loading)
LOAD_TIMEOUT_S = 3600.0
# A lease's start-up beside its run: a cold worker process, the imports its inputs and output need
# (torch for a tensor: seconds), their transfer. The driver waits this much beyond the task timeout;
# the timeout itself is judged on the run the node measured.
LEASE_START_S = 30.0


class RunState:
    """One run's state inside a backend (begin .. end)."""

    def __init__(
        self,
        workflow: Workflow,
        modes: Mapping[str, Mode],
        keys: dict[str, tuple[str, ...]],
        bases: dict[str, tuple[str, int]],
        staged: bool,
        user_tools: dict[str, Any],
        timeout_s: float,
    ) -> None:
        self.workflow = workflow
        self.modes = modes  # where each task really runs (host-only tools on a GPU mode: cpu)
        self.keys, self.bases, self.staged, self.user_tools = keys, bases, staged, user_tools
        self.timeout_s = timeout_s  # a task whose run takes longer ends the run as error
        self.t0 = time.time()  # the clock's zero (wall clock: leases report node wall-clock times)
        self.pending: dict[Any, tuple[str, float]] = {}  # timings ObjectRef -> (task, submitted at)
        self.out_refs: dict[str, Any] = {}  # task -> ObjectRef of its output
        self.nodes: dict[str, str] = {}  # task -> node it ran on

    def ms(self, at: float) -> float:
        return (at - self.t0) * 1000

    @property
    def deadline_s(self) -> float:
        """Wall clock when the longest-running pending task runs over its timeout and start-up."""
        first = min((s for _, s in self.pending.values()), default=time.time())
        return first + self.timeout_s + LEASE_START_S


class RayBackend(Backend):
    """How the ray testbed starts tasks (leases on the cluster) and lets time pass (the wall clock)."""

    name = "ray"
    deterministic = False
    computes_outputs = True

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster  # connection and actors, shared with the testbed's other backends
        self._cpu_slots = cluster.cpu_slots or 1  # set from the cluster's CPUs at begin()
        self.run: RunState | None = None

    @property
    def cpu_slots(self) -> int | None:
        return self._cpu_slots

    def preflight(self, workflow: Workflow) -> None:
        """Connect, and fail before any run when GPU placements cannot run on the cluster (a policy
        may place any task there; a caller that knows its mapping uses ``RayTestbed.check_mapping``)."""
        self.cluster.connect(workflow)
        self.cluster.check_gpu(workflow, {t: Mode.GPU_NOW for t in workflow.task_ids})

    # ---- one run -----------------------------------------------------------------------------------
    def begin(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None, expected: bool = False
    ) -> Failure | None:
        """Connect, warm the tools on every node, then start the clock (``rng`` is unused)."""
        c = self.cluster
        c.connect(workflow)
        c.check_gpu(workflow, mapping)
        nodes = c.nodes()
        self._cpu_slots = c.cpu_slots or max(1, int(sum(n.cpus for n in nodes)))
        modes = effective_mapping(workflow.task_cards, mapping)
        bases = {t: base_and_k(workflow, t) for t in workflow.task_ids}
        keys, needs, staged = plan(workflow, modes, bases, emulated=c.emulate_gpu)
        too_big = unplaceable(workflow, modes, nodes)
        if too_big is not None:
            return too_big
        user_tools = resolve_user_tools(bases)
        ray = ray_module()
        try:  # (creating the actors may fail too: a cluster whose nodes cannot start them)
            hosts = c.hosts(nodes)  # any node may get any task: warm all, before the clock starts
            if any(m is Mode.GPU_QUEUE for m in modes.values()):
                c.queues([n for n in nodes if n.gpus > 0])
            failures = [
                f
                for f in ray.get([h.warm.remote(needs, user_tools) for h in hosts], timeout=LOAD_TIMEOUT_S)
                if f is not None
            ]
        except Exception as exc:  # noqa: BLE001 - a node lost or too slow while loading
            return Failure(
                Status.ERROR,
                workflow.task_ids[0],
                load_error(exc),
                machine_lost=isinstance(machine_lost(exc), MachineLost) or type(exc).__name__ in SETUP_ERRORS,
            )
        if failures:
            key, oom, reason = failures[0]
            task = next((t for t in workflow.task_ids if keys[t] == key), workflow.task_ids[0])
            return load_failure(workflow, task, oom, reason)
        c.start_workers(modes, 1, nodes, self._cpu_slots)
        self.run = RunState(workflow, modes, keys, bases, staged, user_tools, c.timeout_s)
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
        timings, out = (
            remote("lease")
            .options(num_returns=2, **lease_options(start.mode, start.vram_mb))
            .remote(
                self.cluster.prefix,
                kind,
                r.keys[t],
                k,
                r.staged and start.mode is Mode.GPU_NOW,
                args,
                r.user_tools.get(base) if kind == "queue" else None,
            )
        )
        r.pending[timings] = (t, time.time())
        r.out_refs[t] = out

    def wait(self) -> list[Completion]:
        """The next finished leases (their node-reported times, clamped to what the driver saw); a
        lease past the run's deadline is reported as failed, so a lost node never hangs the run."""
        r = self.run
        assert r is not None and r.pending
        ray = ray_module()
        done, rest = ray.wait(list(r.pending), num_returns=1, timeout=max(r.deadline_s - time.time(), 0.0))
        if not done:  # the longest-running task ran over its timeout
            task, submitted = min(r.pending.values(), key=lambda ts: ts[1])
            return [Completion(task, r.ms(submitted), r.ms(time.time()), error=task_timeout(self.cluster.timeout_s))]
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
                out.append(Completion(task, r.ms(submitted), r.ms(observed), error=machine_lost(as_exception(cause))))
                _consume(ray, r.out_refs.pop(task, None))
                continue
            start = min(max(d["start_s"], submitted), observed)  # clamped: node clocks may differ
            end = min(max(d["end_s"], start), observed)
            r.nodes[task] = d["node"]
            if d["end_s"] - d["start_s"] - d["load_ms"] / 1000 > r.timeout_s:  # its run, as its node measured it
                out.append(Completion(task, r.ms(start), r.ms(end), error=task_timeout(r.timeout_s)))
                continue
            out.append(Completion(task, r.ms(start), r.ms(end), d["load_ms"], output))
        return sorted(out, key=lambda c: c.end_ms)

    def abort(self, wait: bool = True) -> dict[str, float]:
        """Let the run's other leases end (until the deadline; not at all without ``wait``), then
        cancel what is left."""
        r = self.run
        if r is None or not r.pending:
            return {}
        ray = ray_module()
        wait_s = max(r.deadline_s - time.time(), 0) if wait else 0.0
        _, left = ray.wait(list(r.pending), num_returns=len(r.pending), timeout=wait_s)
        for ref in left:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished, or its node is gone
                pass
        for ref, (task, _) in r.pending.items():
            _consume(ray, ref, timeout_s=0.5)
            _consume(ray, r.out_refs.pop(task, None), timeout_s=0.5)
        r.pending.clear()
        return {}

    def end(self) -> dict[str, Any]:
        """The run's details: where each task ran, and whether GPUs were emulated."""
        r, self.run = self.run, None
        extra: dict[str, Any] = {
            "size": self.cluster.size,
            "ray_address": self.cluster.address or "local",
            "emulated_gpu": self.cluster.emulate_gpu,
        }
        if self.cluster.emulate_gpu:
            extra["timing_note"] = EMULATED_NOTE
        if r is not None:
            extra["nodes"] = {t: n[:12] for t, n in r.nodes.items()}
        return extra

    def close(self) -> None:
        self.cluster.close()


def load_error(exc: BaseException) -> str:
    """The one line of a failed load of the tools on the cluster (Ray's timeout said in words)."""
    if type(exc).__name__ == "GetTimeoutError":
        return (
            f"loading the tools on the Ray cluster did not end within {LOAD_TIMEOUT_S:g} s (the load deadline, "
            "agentsched.testbeds.ray.backend.LOAD_TIMEOUT_S; --task-timeout-s bounds runs, not loads)"
        )
    return f"loading the tools on the Ray cluster failed: {one_line(getattr(exc, 'cause', None) or exc)}"


def _consume(ray: Any, ref: Any, timeout_s: float | None = None) -> None:
    """Read a lease's result whose error the run has already judged (or will not judge: cancelled):
    an ObjectRef holding an error that is never read makes Ray print its whole traceback as an
    "Unhandled error" when the ref is dropped, ~20 lines for a one-line failure."""
    if ref is None:
        return
    try:
        ray.get(ref, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - the error is the expected content
        pass


# Ray's errors that say the machine failed, not the task: its node, its raylet, an object its node
# held. A worker that crashed, an actor that died, Ray's out-of-memory kill and RaySystemError (also
# an output that cannot be read back: a CUDA tensor on a node without CUDA) are not among them: the
# tool or its placement may have caused those.
MACHINE_ERRORS = ("NodeDiedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError")
# and those that, while the tools are loaded before the clock on every node whatever the mapping,
# say the cluster could not host them (an actor it could not create or keep)
SETUP_ERRORS = ("RaySystemError", "ActorDiedError", "ActorUnavailableError")


def machine_lost(exc: BaseException) -> BaseException:
    """``exc`` as a ``MachineLost`` when Ray says the task's machine failed, else as it is."""
    errors = sys.modules.get("ray.exceptions")
    kinds = tuple(k for k in (getattr(errors, n, None) for n in MACHINE_ERRORS) if isinstance(k, type))
    if kinds and isinstance(exc, kinds) and not isinstance(exc, getattr(errors, "RayTaskError", ())):
        return MachineLost(f"{type(exc).__name__}: {one_line(exc).partition(': ')[2] or exc}")
    return exc


def as_exception(cause: Any) -> BaseException:
    return cause if isinstance(cause, BaseException) else TestbedError(str(cause))
