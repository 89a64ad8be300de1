"""One LangGraph invocation's state (``Invocation``): what its placeable nodes share while LangGraph runs
the graph: the start rules' gate, each task's span, its outputs and failures; and how a node runs its
tool where the mapping places it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentsched.integrations.langgraph.gate import Aborted, Gate, Infeasible
from agentsched.integrations.langgraph.nodes import FunctionNode
from agentsched.model.tool import Tool
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.real import task_timeout
from agentsched.testbeds.tool_pool import concurrent_safe

if TYPE_CHECKING:
    from agentsched.integrations.langgraph.testbed import LangGraphTestbed

DEADLINE_POLL_S = 0.05  # with a node timeout: how often a node waiting for its start looks again


class LoadFailed(Exception):
    """A tool could not be loaded where the run places it."""

    def __init__(self, task: str, error: BaseException) -> None:
        super().__init__(task)
        self.task, self.error = task, error


@dataclass
class NodeSpan:
    """A task's part of one invocation (all its runs, when LangGraph calls it several times)."""

    ready_s: float  # when LangGraph first called it
    start_s: float  # when it first passed the start rules
    end_s: float | None = None  # when its last run ended
    load_ms: float = 0.0  # gpu_queue load-in paid, summed over runs
    runs: int = 0  # finished runs


class Invocation:
    """Per-invocation state, reached by the placeable nodes through ``config['configurable']``."""

    def __init__(
        self,
        bed: LangGraphTestbed,
        workflow: Workflow,
        mapping: dict[str, Mode],
        effective: dict[str, Mode],
        inputs: dict[str, Any],
        staged: bool,
    ) -> None:
        self.bed = bed
        self.mapping = mapping  # as placed (what the policy chose)
        self.effective = effective  # where each task really runs (host-only tools: cpu)
        self.inputs = inputs  # the invocation's arguments
        self.staged = staged  # gpu_now tools wait on the host under a VRAM budget
        self.budget_mb = workflow.vram_budget_mb
        cards = workflow.task_cards
        self.gate = Gate(
            effective,
            {t: c.vram_needed_mb for t, c in cards.items()},
            budget_mb=workflow.vram_budget_mb,
            cpu_slots=bed.cpu_workers,
        )
        self.spans: dict[str, NodeSpan] = {}
        self.order: list[str] = []  # tasks in first-start order
        self.outputs: dict[str, Any] = {}
        self.failures: list[tuple[str, BaseException]] = []  # failing runs (task, error), in order
        self.state: Any = None  # LangGraph's final state, once it ended well
        self._lock = threading.Lock()
        # one run of a task at a time: a Send fan-out calls one node several times in one step, but
        # it has one tool instance, one placement and one VRAM reservation
        self._task_locks = {t: threading.Lock() for t in mapping}

    def task_inputs(self, task: str, state: Mapping[str, Any]) -> dict[str, Any]:
        node = self.bed.spec.nodes[task]
        if isinstance(node, FunctionNode):
            return dict(state)
        src = self.bed.spec.inputs[task]
        out: dict[str, Any] = dict(self.inputs) if src.invocation else {}
        for name, key in src.keys:
            if state.get(key) is not None:
                out[name] = state[key]
        return out

    def run_node(self, task: str, state: Mapping[str, Any]) -> Any:
        """Run placeable node ``task`` on its placement; called by the node from LangGraph's thread."""
        with self._task_locks[task]:
            return self._run_node(task, state)

    def _run_node(self, task: str, state: Mapping[str, Any]) -> Any:
        tool = self.bed.tool_of(task)
        mode = self.effective[task]
        ready = time.perf_counter()
        try:
            inputs = self.task_inputs(task, state)
            self.gate.enter(task)
        except (Infeasible, Aborted) as exc:
            self._fail(task, exc)
            raise
        if self.bed.node_timeout_s is None:
            return self._held_run(task, tool, mode, ready, inputs, None)
        return self._run_with_deadline(task, tool, mode, ready, inputs, self.bed.node_timeout_s)

    def _held_run(
        self, task: str, tool: Tool, mode: Mode, ready: float, inputs: dict[str, Any], started: threading.Event | None
    ) -> Any:
        """Take the node's share of the machine (``started`` is set then), run it, give both back."""
        try:
            with self.bed.machine.node(
                task,
                mode,
                self.gate.vram_mb.get(task, 0.0),
                staged=self.staged,
                shared=concurrent_safe(tool),
                budget_mb=self.budget_mb,
            ):
                if started is not None:
                    started.set()
                return self._run_placed(task, tool, mode, ready, inputs)
        finally:
            self.gate.leave(task)

    def _run_with_deadline(
        self, task: str, tool: Tool, mode: Mode, ready: float, inputs: dict[str, Any], timeout_s: float
    ) -> Any:
        """``_held_run`` on a thread of its own, given ``timeout_s`` from when it holds its share of the
        machine (a wait for a slot, the queue or the tool is not running). Past it the invocation fails
        at once; the run cannot be stopped, so it keeps its tool, slot and VRAM until it returns."""
        started, done, box = threading.Event(), threading.Event(), {}

        def work() -> None:
            try:
                box["out"] = self._held_run(task, tool, mode, ready, inputs, started)
            except BaseException as exc:  # noqa: BLE001 - handed to the node's thread
                box["err"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name=f"agentsched-node-{task}", daemon=True).start()
        while not done.is_set() and not started.wait(DEADLINE_POLL_S):
            pass
        if not done.wait(timeout_s):
            exc = task_timeout(timeout_s)
            self._fail(task, exc)
            raise exc
        if "err" in box:
            raise box["err"]
        return box["out"]

    def _run_placed(self, task: str, tool: Tool, mode: Mode, ready: float, inputs: dict[str, Any]) -> Any:
        """Run ``task``'s tool once its gate and the shared machine let it (the span starts now)."""
        node = self.bed.spec.nodes[task]
        gpu = self.bed.device
        if self.gate.aborted:  # it failed while this node waited for its share of the machine
            self._fail(task, Aborted())
            raise Aborted
        start = time.perf_counter()
        with self._lock:
            if task not in self.spans:
                self.spans[task] = NodeSpan(ready, start)
                self.order.append(task)
        load_ms = 0.0
        try:
            if mode is Mode.GPU_QUEUE:
                self.bed.place(task, gpu)
                tool.sync()
                load_ms = (time.perf_counter() - start) * 1000
            elif mode is Mode.GPU_NOW and self.staged:
                self.bed.place(task, gpu)
            output = tool.run(inputs)
            tool.sync()
            end = time.perf_counter()
        except BaseException as exc:
            self._fail(task, exc)
            raise
        finally:
            if mode is Mode.GPU_QUEUE:
                self.bed.place(task, None)
            elif mode is Mode.GPU_NOW and self.staged:
                self.bed.place(task, "cpu")
        with self._lock:
            span = self.spans[task]
            span.end_s, span.runs, span.load_ms = end, span.runs + 1, span.load_ms + load_ms
            self.outputs[task] = output
        return node.update(task, output)

    def _fail(self, task: str, exc: BaseException) -> None:
        with self._lock:
            if not isinstance(exc, Aborted):
                self.failures.append((task, exc))
        if isinstance(exc, Infeasible):  # no retry can make it fit: release the nodes still waiting
            self.gate.abort()

    def failure(self, error: BaseException) -> tuple[str, BaseException] | None:
        """The placeable node's run that raised the graph's ``error`` (a node LangGraph retried may
        have failed before), or None."""
        for task, exc in self.failures:
            if exc is error:
                return task, exc
        return None
