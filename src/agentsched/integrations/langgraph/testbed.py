"""The LangGraph testbed: one invocation = one run of the compiled LangGraph graph, with every
placeable node executed where the mapping places it.

LangGraph keeps running the graph (its steps, conditional edges, reducers, parallel branches);
each placeable node, when LangGraph calls it, passes the start rules of ``gate.Gate`` and runs
its tool on the mapped device. Warm models, as on the local testbed: before the clock starts a
``cpu`` task's tool is loaded on the host and a ``gpu_now`` task's on the GPU (under a VRAM
budget it waits on the host and is moved to the GPU while it runs); a ``gpu_queue`` task loads
when admitted (the span's ``load_ms``) and unloads after. Host nodes run as they are and are timed
through LangGraph's callbacks (``Execution.extra["host_spans"]``). ``e2e_ms`` is the wall time of
the whole graph invocation, host work included. Runs may overlap (a served graph): concurrent
invocations share the tools, the CPU slots, the GPU queue and the VRAM budget (``machine.py``).
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError, one_line
from agentsched.integrations.langgraph.gate import Infeasible
from agentsched.integrations.langgraph.graph import GraphSpec, builder_of, inspect_graph, refuse_compile_options
from agentsched.integrations.langgraph.host_timer import HostTimer
from agentsched.integrations.langgraph.invocation import Invocation, LoadFailed
from agentsched.integrations.langgraph.machine import GraphMachine
from agentsched.integrations.langgraph.nodes import CONTEXT_KEY
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.mapping import validate_mapping
from agentsched.model.tool import Tool
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.failures import host_failure_external, is_oom
from agentsched.testbeds.real import first_load_alone
from agentsched.tools import cuda_available

#: input key under which ``GraphRuntime`` passes a ``RunResult`` to fill (never given to the graph)
RESULT_KEY = "__agentsched_result__"
CLOSE_WAIT_S = 60.0  # close(): how long the runs in progress may take to end before tools unload
log = logging.getLogger("agentsched.langgraph")


@dataclass
class RunResult:
    """What one run hands back to its caller beside the ``Execution``: LangGraph's final state.
    Why not an attribute of the testbed: invocations run at once, each in its caller's thread, and a
    probe in the runtime's own thread; the caller's object travels with its inputs."""

    state: Any = None  # None when the run failed (or did not run: a replayed execution)
    execution: Execution | None = None


class LangGraphTestbed(Testbed):
    """Runs a LangGraph graph with its placeable nodes where a mapping places them."""

    name = "langgraph"
    deterministic = False
    concurrent_runs = True  # Runtime: runs may overlap (each in its caller's thread; machine.py)

    def __init__(
        self,
        graph: Any,
        *,
        device: str = "cuda:0",
        cpu_workers: int | None = None,
        recursion_limit: int | None = None,
        node_timeout_s: float | None = None,
    ) -> None:
        self.spec: GraphSpec = inspect_graph(graph)  # raises GraphError naming an unmappable node
        builder = builder_of(graph)
        if graph is not builder:
            refuse_compile_options(graph)
        # the user's compiled graph keeps its compile options; a builder is compiled plainly
        self.compiled = graph if graph is not builder else builder.compile()
        if not (isinstance(device, str) and re.fullmatch(r"(cuda|gpu)(:\d+)?", device)):  # (tpu:7, 0: accepted before)
            raise TestbedError(f"device must be cuda or cuda:N (where GPU placements run), got {device!r}")
        self.device = "cuda:0" if device in ("cuda", "gpu") else device  # where GPU placements run
        workers = cpu_workers if cpu_workers is not None else (os.cpu_count() or 1)
        if workers < 1:
            raise TestbedError(f"langgraph testbed: cpu_workers must be >= 1, got {workers}")
        self.cpu_workers = workers  # cpu placements at once, every invocation together
        self.recursion_limit = recursion_limit  # LangGraph's step limit (None: its default)
        if node_timeout_s is not None and not (isinstance(node_timeout_s, (int, float)) and node_timeout_s > 0):
            raise TestbedError(f"langgraph testbed: node_timeout_s must be a number > 0, got {node_timeout_s!r}")
        self.node_timeout_s = node_timeout_s  # a placeable node's run past it fails its invocation (None: none)
        self.machine = GraphMachine(workers, self.device)  # what concurrent invocations share (machine.py)
        self._tools: dict[str, Tool] = {}  # task -> its tool instance (kept loaded across invocations)
        self._tools_lock = threading.Lock()
        self._where: dict[str, str | None] = {}  # task -> device it is loaded on (None: unloaded)
        # the last run's, for a caller running one at a time (GraphRuntime reads its RunResult)
        self._last_state: Any = None
        self._last_execution: Execution | None = None

    # ---- environment -------------------------------------------------------------------------
    _real_cuda = staticmethod(cuda_available)  # a seam: tests replace it

    def host_only(self, workflow: Workflow) -> bool:
        """No CUDA here, for a workflow with a GPU-capable tool: the runtime then runs it host-only."""
        return any(c.has_gpu for c in workflow.task_cards.values()) and not self._cuda_available()

    def _cuda_available(self) -> bool:
        """May GPU placements run here? (Tests replace it to drive tools that only record the device.)"""
        return self.device != "cpu" and self._real_cuda()

    def _check_gpu(self, workflow: Workflow, effective: Mapping[str, Mode]) -> None:
        on_gpu = [t for t in workflow.task_ids if effective[t] is not Mode.CPU]
        if on_gpu and not self._cuda_available():
            t = on_gpu[0]
            raise TestbedError(
                f"task {t} is mapped to {effective[t].value} but this machine has no CUDA GPU: "
                "map every task to cpu, or run where CUDA is available"
            )

    def preflight(self, workflow: Workflow) -> None:
        """Fail before any run when GPU placements cannot run here (one-line TestbedError)."""
        self._check_gpu(workflow, effective_mapping(workflow.task_cards, {t: Mode.GPU_NOW for t in workflow.task_ids}))

    # ---- tools -------------------------------------------------------------------------------
    def tool_of(self, task: str) -> Tool:
        with self._tools_lock:
            if task not in self._tools:
                self._tools[task] = self.spec.nodes[task].new_tool()
                self._where[task] = None
            return self._tools[task]

    def place(self, task: str, device: str | None) -> None:
        """Have ``task``'s tool loaded on ``device`` (None: unloaded)."""
        tool, cur = self.tool_of(task), self._where.get(task)
        if cur == device:
            return
        if device is None:
            tool.unload()
        elif cur is None:
            with first_load_alone(f"{type(tool).__module__}:{type(tool).__qualname__}"):
                tool.load(device)
        else:
            tool.move(device)
        self._where[task] = device

    def close(self, wait_s: float | None = None) -> None:
        """Start no invocation and no node call any more (a node waiting for its start fails its
        invocation), let the runs in progress end (at most ``wait_s``, default ``CLOSE_WAIT_S``), then
        unload the tools. Runs still going on then keep every tool loaded: a thread of its own unloads
        them once those runs end (at most ``CLOSE_WAIT_S`` more; past it they stay loaded, with a warning)."""
        if self.machine.close(CLOSE_WAIT_S if wait_s is None else wait_s):
            self._unload_all()
            return
        # why a thread: a node call cannot be stopped, and close must not wait for it past wait_s
        threading.Thread(target=self._unload_when_idle, name="agentsched-langgraph-unload", daemon=True).start()

    def _unload_when_idle(self) -> None:
        if self.machine.close(CLOSE_WAIT_S):
            self._unload_all()
            return
        # a run may still call any node (it may be in a host node now): nothing is unloaded under it
        log.warning(
            "LangGraph testbed closed while invocations still ran after %g s: the tools are left loaded", CLOSE_WAIT_S
        )

    def _unload_all(self) -> None:
        for task in list(self._tools):
            if self._where.get(task) is not None:
                self._tools[task].unload()
                self._where[task] = None

    @property
    def last_execution(self) -> Execution | None:
        """The ``Execution`` of the last invocation this testbed ran (None before the first)."""
        return self._last_execution

    @property
    def last_state(self) -> Any:
        """The final LangGraph state of the last invocation (None when it failed)."""
        return self._last_state

    # ---- run ---------------------------------------------------------------------------------
    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Invoke the graph once on ``inputs`` (``rng`` is unused: the noise is the machine's own).
        Runs may overlap; ``inputs[RESULT_KEY]``, when given, is the caller's ``RunResult``."""
        mapping = validate_mapping(workflow, mapping)
        missing = [t for t in workflow.task_ids if t not in self.spec.nodes]
        if missing:
            raise TestbedError(f"langgraph testbed: task {missing[0]} is not a placeable node of this graph")
        effective = effective_mapping(workflow.task_cards, mapping)
        self._check_gpu(workflow, effective)
        args = dict(inputs or {})
        result = args.pop(RESULT_KEY, None)
        staged = workflow.vram_budget_mb is not None
        wants = {t: self._warm_device(effective[t], staged) for t in workflow.task_ids}
        # the key has the modes too: a cpu run and a staged gpu_now run both wait on the host, but the
        # second moves the tool while it runs (runs under one key share the tools as they are)
        key = tuple(sorted((t, effective[t].value, wants[t]) for t in workflow.task_ids))
        inv = Invocation(self, workflow, mapping, effective, args, staged)
        try:
            with self.machine.placement(key, lambda: self._warm(wants)):
                x = self._invoke(workflow, inv)
        except LoadFailed as f:
            status = Status.OOM if is_oom(f.error) else Status.ERROR
            tool = self.spec.nodes[f.task].tool_class().display_name()
            x = Execution(
                status=status,
                mapping=dict(mapping),
                e2e_ms=None,
                elapsed_ms=0.0,
                peak_vram_mb=0.0,
                spans=(),
                message=f"node {f.task} ({tool}) failed to load: {one_line(f.error)}",
                testbed=self.name,
                extra={"failed_task": f.task},
            )
        self._last_execution, self._last_state = x, inv.state
        if isinstance(result, RunResult):
            result.state, result.execution = inv.state, x
        return x

    def _warm_device(self, mode: Mode, staged: bool) -> str | None:
        """Where a task's tool waits between runs: the host for ``cpu`` (and a ``gpu_now`` staged
        under a VRAM budget), the GPU for ``gpu_now``, nowhere for ``gpu_queue`` (it loads when
        admitted)."""
        if mode is Mode.CPU or (mode is Mode.GPU_NOW and staged):
            return "cpu"
        return self.device if mode is Mode.GPU_NOW else None

    def _warm(self, wants: Mapping[str, str | None]) -> None:
        """Warm models, before any run's clock starts (``GraphMachine.placement``)."""
        for task, device in wants.items():
            try:
                self.place(task, device)
            except Exception as exc:  # noqa: BLE001 - user code: a tool that cannot load fails the run
                raise LoadFailed(task, exc) from exc

    def _invoke(self, workflow: Workflow, inv: Invocation) -> Execution:
        timer = HostTimer()
        config: dict[str, Any] = {"configurable": {CONTEXT_KEY: inv}, "callbacks": [timer.handler]}
        if self.recursion_limit is not None:
            config["recursion_limit"] = self.recursion_limit
        t0 = time.perf_counter()
        error: BaseException | None = None
        try:
            state = self.compiled.invoke(dict(inv.inputs), config=config)
        except Exception as exc:  # noqa: BLE001 - any node's failure ends this invocation only
            error, state = exc, None
        t_end = time.perf_counter()
        inv.gate.abort()  # nothing may still wait (a failed step's other nodes)
        return self._record(workflow, inv, timer, t0, t_end, state, error)

    def _record(
        self,
        workflow: Workflow,
        inv: Invocation,
        timer: HostTimer,
        t0: float,
        t_end: float,
        state: Any,
        error: BaseException | None,
    ) -> Execution:
        def ms(at: float) -> float:
            return (at - t0) * 1000

        spans = tuple(
            TaskSpan(
                task=t,
                tool=workflow.task_cards[t].name,
                mode=inv.effective[t],
                ready_ms=ms(s.ready_s),
                start_ms=ms(s.start_s),
                end_ms=None if s.end_s is None else ms(s.end_s),
                load_ms=s.load_ms,
                vram_mb=inv.gate.vram_mb.get(t, 0.0) if inv.effective[t] is not Mode.CPU else 0.0,
            )
            for t, s in ((t, inv.spans[t]) for t in inv.order)
        )
        hosts = set(self.spec.host_nodes)
        extra: dict[str, Any] = {
            "host_spans": [
                {"node": n, "start_ms": round(ms(a), 3), "end_ms": round(ms(b), 3)}
                for n, a, b in sorted(timer.done, key=lambda x: x[1])
                if n in hosts
            ],
            "runs": {t: inv.spans[t].runs for t in inv.order},
            "skipped": [t for t in workflow.task_ids if t not in inv.spans],  # conditional: did not run
            "cpu_workers": self.cpu_workers,
        }
        timeline = tuple((ms(a), mb) if i else (0.0, mb) for i, (a, mb) in enumerate(inv.gate.vram_timeline))
        common = dict(
            mapping=dict(inv.mapping),
            peak_vram_mb=inv.gate.peak_vram_mb,
            spans=spans,
            vram_timeline=timeline,
            testbed=self.name,
        )
        if error is None:
            inv.state = state
            e2e = ms(t_end)
            return Execution(
                status=Status.OK, e2e_ms=e2e, elapsed_ms=e2e, extra=extra, outputs=dict(inv.outputs), **common
            )
        status, message, node, exc = self._failure(inv, timer, error)
        # failed_task names a task (a placeable node) the policy may move; a host node is not one
        # failed_node: a host node raised (not the placement's doing); LangGraph's own error (no node:
        # a step timeout, a recursion limit) may be the placement's, and is not marked so.
        # external: it cannot be the placement's at all, whatever the loop saw before (model/rounds.py)
        failed = {"failed_task": node} if node in self.spec.nodes else {"failed_node": node} if node is not None else {}
        if "failed_node" in failed:
            ran = timer.failed_from.get(str(node), (t_end, t_end))
            failed["external"] = host_failure_external(exc, ran, (s.start_s for s in inv.spans.values()))
        return Execution(
            status=status,
            e2e_ms=None,
            elapsed_ms=ms(t_end),
            message=message,
            extra={**extra, **failed},
            outputs=dict(inv.outputs),
            **common,
        )

    def _failure(
        self, inv: Invocation, timer: HostTimer, error: BaseException
    ) -> tuple[Status, str, str | None, BaseException]:
        """Status, one-line message, failing node and its error, of a failed invocation."""
        failed = inv.failure(error)
        if failed is None:  # a placeable node's failure first (LangGraph raises one of a step's errors at
            # random, and the placement may have caused that one), then a host node's
            host = next((f for f in timer.failed if f[1] is error), None)
            failed = (inv.failures[0] if inv.failures else None) or host or (timer.failed[0] if timer.failed else None)
        if failed is not None and failed[0] in self.spec.nodes:
            task, exc = failed
            if isinstance(exc, Infeasible):
                return Status.OOM, str(exc), task, exc
            tool = self.spec.nodes[task].tool_class().display_name()
            if is_oom(exc):
                return Status.OOM, f"node {task} ({tool}): CUDA out of memory: {one_line(exc)}", task, exc
            return Status.ERROR, f"node {task} ({tool}) failed: {one_line(exc)}", task, exc
        if failed is not None:
            node, exc = failed
            return Status.ERROR, f"node {node} (host) failed: {one_line(exc)}", node, exc
        return Status.ERROR, f"graph failed: {one_line(error)}", None, error  # LangGraph itself (a recursion limit)
