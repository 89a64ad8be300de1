"""Run a LangGraph graph through the agentsched runtime: each invocation's placeable nodes run where
the runtime's policy placed them, and the runtime learns the placement across invocations.

    with GraphRuntime(graph, name="rag", store="agentsched.db") as rt:
        r = rt.invoke({"documents": docs, "question": q})
        r.state        # LangGraph's final state
        r.mapping      # where each placeable node ran
        r.e2e_ms       # the graph's wall time, host nodes included

It is ``agentsched.Runtime`` (the one behind ``agentsched invoke``: same policies, same SQLite
store, same rounds, exploration budget and resume) over a ``LangGraphTestbed``. The workflow is
``workflow_from_graph(graph, name)``: so ``agentsched history NAME --store FILE`` shows its
invocations, and a new ``GraphRuntime`` on the same store and graph resumes learning.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError, WorkflowError
from agentsched.integrations.langgraph.graph import GraphError, GraphSpec, builder_of, inspect_graph
from agentsched.integrations.langgraph.testbed import RESULT_KEY, LangGraphTestbed, RunResult
from agentsched.model.execution import Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.runtime.runtime import CLOSE_WAIT_S
from agentsched.testbeds.spec import TestbedKind, TestbedSpec, as_spec


class GraphInputError(AgentschedError):
    """An invocation's input is not a state mapping the graph can start from."""


def workflow_from_graph(
    graph: Any,
    name: str,
    *,
    decision_space: str = "three_way",
    vram_budget_mb: float | None = None,
    cards: Any = None,
    spec: GraphSpec | None = None,
) -> Workflow:
    """The agentsched workflow of a LangGraph graph: one task per placeable node (its Tool class,
    so the workflow's identity in the store is the same in every process), the contracted DAG.
    ``cards``: as ``agentsched.runtime.workflow_from_tools`` (tasks without one run in cold start)."""
    from agentsched.runtime import workflow_from_tools

    spec = spec if spec is not None else inspect_graph(graph)
    if not spec.nodes:
        raise AgentschedError(f"graph {name!r} has no placeable node: add tools with tool_node(...) or @placeable")
    try:
        return workflow_from_tools(
            name, spec.tools(), spec.edges, decision_space=decision_space, vram_budget_mb=vram_budget_mb, cards=cards
        )
    except GraphError:
        raise
    except WorkflowError as e:  # e.g. a node name that cannot be a task's: the graph's error, as documented
        raise GraphError(str(e)) from None


@dataclass(frozen=True)
class GraphResult:
    """One invocation of the graph."""

    state: Any  # LangGraph's final state (None when the invocation failed)
    outputs: dict[str, Any]  # every placeable node's output that ran, by node
    mapping: dict[str, Mode]  # where each placeable node was placed
    e2e_ms: float | None  # wall time of the whole graph invocation; None when it failed
    timeline: tuple[dict[str, Any], ...]  # placeable nodes' spans (task, tool, mode, ready/start/end ms...)
    host_spans: tuple[dict[str, Any], ...]  # host nodes' runs (node, start_ms, end_ms)
    status: Status  # ok, error (a node raised) or oom
    message: str  # the one-line error ("" when ok)
    invocation_id: int | None  # its id in the store (None without a store)
    kind: str  # "round" or "probe" (a what-if of the monitor, served by this invocation)
    round: int  # the round it belongs to

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class GraphRuntime:
    """``agentsched.Runtime`` over a LangGraph graph. See the module docstring."""

    def __init__(
        self,
        graph: Any,
        name: str,
        *,
        policy: Any = None,
        store: str | Path | Any | None = "agentsched.db",
        round_size: int = 5,
        explore_fraction: float = 0.1,
        seed: int = 0,
        decision_space: str = "three_way",
        vram_budget_mb: float | None = None,
        cards: Any = None,
        device: str = "cuda:0",
        policy_options: dict[str, Any] | None = None,
        testbed: TestbedSpec | TestbedKind | str | LangGraphTestbed | None = None,
    ) -> None:
        """``policy``: None runs ``agent-plan`` (``agent-plan-cold`` when a node has no card);
        ``testbed``: a ``TestbedSpec`` of kind local (the graph runs in this process; its
        ``cpu_slots`` is the CPU worker pool), the kind ``"local"`` as shorthand (as for
        ``Runtime``), or a built ``LangGraphTestbed``."""
        from agentsched.runtime import Runtime

        self._own_testbed = not isinstance(testbed, LangGraphTestbed)
        if not isinstance(testbed, LangGraphTestbed):
            spec = as_spec(testbed if testbed is not None else TestbedKind.LOCAL)
            if spec.kind is not TestbedKind.LOCAL:
                raise AgentschedError(f"a LangGraph graph runs on the local testbed (got {spec.kind.value})")
            testbed = LangGraphTestbed(graph, device=device, cpu_workers=spec.cpu_slots, node_timeout_s=spec.timeout_s)
        self.testbed = testbed
        wf = workflow_from_graph(
            graph,
            name,
            decision_space=decision_space,
            vram_budget_mb=vram_budget_mb,
            cards=cards,
            spec=self.testbed.spec,
        )
        try:  # without CUDA the runtime runs it host-only, and logs so (testbed.host_only)
            self.runtime = Runtime(
                wf,
                policy=policy,
                store=store,
                testbed=self.testbed,
                round_size=round_size,
                explore_fraction=explore_fraction,
                seed=seed,
                policy_options=policy_options,
            )
        except BaseException:
            if self._own_testbed:
                self.testbed.close()
            raise
        self.workflow = self.runtime.workflow  # the workflow the runtime runs (name = ``name``)
        self.runtime.takes_any_input = True  # the graph's state: any key (checked in invoke)
        channels = set(getattr(builder_of(graph), "channels", {}) or {})
        self._state_keys = frozenset() if "__root__" in channels else frozenset(channels)  # (empty: not checked)

    def invoke(self, inputs: dict[str, Any] | None = None, /, **kwargs: Any) -> GraphResult:
        """Invoke the graph once on its input state (``inputs`` and/or keyword arguments). A node
        that raises gives a failed result with a one-line message; the next invocation runs."""
        if inputs is not None and not isinstance(inputs, Mapping):
            raise GraphInputError(
                f"graph input must be a mapping of state keys to values (e.g. "
                f"{{'question': ...}}), got {type(inputs).__name__}"
            )
        twice = sorted(set(inputs or {}) & set(kwargs))
        if twice:
            raise GraphInputError(f"graph input {twice[0]!r} given twice (in the mapping and as a keyword)")
        args = {**(inputs or {}), **kwargs}
        bad = [k for k in args if not isinstance(k, str) or k == RESULT_KEY]
        if bad:
            raise GraphInputError(
                f"graph input keys must be text other than {RESULT_KEY!r} (the adapter's own), got {bad[0]!r}"
            )
        keys = self._state_keys  # LangGraph drops a key its state has not, silently: a misspelt input
        unknown = sorted(k for k in args if keys and k not in keys)
        if unknown:
            raise GraphInputError(
                f"graph input {unknown[0]!r} is not a key of the graph's state (its keys: {', '.join(sorted(keys))})"
            )
        from agentsched.runtime.inputs import check_inputs_given

        try:  # checked here, before the run's RunResult joins them (the runtime checks what it is given)
            check_inputs_given(self.workflow, args)
        except AgentschedError as e:  # a missing input is the caller's, as every other input error
            raise GraphInputError(str(e)) from None
        run = RunResult()  # filled by the run that serves this invocation, whichever thread runs it
        r = self.runtime.invoke(**args, **{RESULT_KEY: run})
        x = run.execution  # None when the testbed refused the mapping, or a stored execution answered
        return GraphResult(
            state=run.state if r.ok else None,
            outputs=dict(x.outputs) if x is not None and r.ok else {},
            mapping=r.mapping,
            e2e_ms=r.e2e_ms,
            timeline=r.timeline,
            host_spans=tuple(x.extra.get("host_spans", ())) if x is not None else (),
            status=r.status,
            message=r.message,
            invocation_id=r.invocation_id,
            kind=r.kind,
            round=r.round,
        )

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop the runtime (``Runtime.close``: the invocations running end and are recorded, for at
        most ``wait_s``), close the store, and close a testbed it built: no node call starts any more,
        and its tools unload once the calls running end, without waiting for them here (a
        ``LangGraphTestbed`` passed in is the caller's to close: it may serve another runtime)."""
        deadline_s = time.monotonic() + wait_s
        try:
            self.runtime.close(wait_s)
        finally:
            if self._own_testbed:
                self.testbed.close(max(0.0, deadline_s - time.monotonic()))

    def __enter__(self) -> GraphRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
