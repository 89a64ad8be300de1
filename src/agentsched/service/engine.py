"""The service's engine, free of HTTP: one learning ``Runtime`` per workflow, one store, one
admission gate, the shared machine, the cut at shutdown.

Every workflow gets its own ``Runtime`` (its own loop thread and testbed), so invocations of
different workflows run at once; within a workflow, the runtime runs a round's invocations at once
(runtime/dispatch.py). All runtimes share one ``Store`` and one VRAM budget, the smallest any
served workflow declares (or ``vram_budget_mb`` on the real-time simulator): on the real-time
simulator one ``SharedMachine``; on the local testbed the engine's ``ToolPool`` (passed in, or its
own), which keeps every tool loaded between invocations and holds the CPU slots every invocation
shares. Placement: each workflow's policy chooses a mapping per invocation, or ``live``: every
task placed when it becomes ready by the configured decider over the machine's live state
(``machines.py``). A live invocation is recorded as kind ``live``, outside the learner's sequence,
like a pinned run; a pinned mapping still wins.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.model.workflow import Mode, Workflow
from agentsched.runtime import Runtime
from agentsched.runtime.inputs import HTTP_HINT, check_input_names, check_inputs_given
from agentsched.runtime.runtime import InvokeResult
from agentsched.runtime.setup import check_sim_cards
from agentsched.service.admission import Admission, Flight, Refusal
from agentsched.service.config import Placement, ServiceConfig
from agentsched.service.cut import CUT_GRACE_S, CUT_MESSAGE, record_cut
from agentsched.service.discovery import check_live_cards, import_tool_libraries, workflow_files
from agentsched.service.machines import Machines, build_machines
from agentsched.service.realtime import RealtimeTestbed
from agentsched.service.shared_budget import shared_budget, warn_set_aside
from agentsched.store.store import Store
from agentsched.testbeds.spec import TestbedKind
from agentsched.testbeds.tool_pool import ToolPool, low_host_memory

log = logging.getLogger("agentsched.service")


class UnknownWorkflowError(AgentschedError):
    """A request names a workflow the service does not serve (HTTP 404)."""


class Engine:
    """Runtimes by workflow name, the shared store, admission and the cut. See the module docstring."""

    def __init__(self, config: ServiceConfig, *, pool: ToolPool | None = None) -> None:
        self.config = config
        workflows = workflow_files(config.workflows)
        if config.cards:
            workflows = [w.with_cards(config.cards) for w in workflows]
        # one GPU serves every workflow: its budget is the smallest any of them declares; each plans for it
        budget, workflows = shared_budget(workflows, config.vram_budget_mb)
        if config.realtime:
            for wf in workflows:
                check_sim_cards(config.testbed, wf)  # the simulator needs real cards
        self.pool = _engine_pool(config, budget, pool)
        import_tool_libraries(workflows, config.testbed)
        self.admission = Admission(config.max_concurrency)
        self.store = Store(config.store)
        self.runtimes: dict[str, Runtime] = {}
        self._testbeds: list[Any] = []
        self._closed = False
        self.machines = Machines()
        try:
            self.machines = build_machines(config, workflows, budget, self.store, self.pool)
            for wf in workflows:
                self.runtimes[wf.name] = self._runtime(wf)
            if self.machines.live is not None:
                for rt in self.runtimes.values():
                    check_live_cards(rt.workflow)
            warn_set_aside(self.store, self.runtimes)
        except BaseException:
            self.close()
            raise
        self.cut_count = 0  # invocations the shutdown cut (recorded as error)
        # pinned, live and cut invocations, outside the rounds: those of earlier processes, then ours
        self.outside_runs = {n: self._stored(rt, outside=True) for n, rt in self.runtimes.items()}
        # the learner's sequence as stored at start: while the replay goes on (the loop thread's work)
        # `invocations` still counts every one recorded
        self.stored_runs = {n: self._stored(rt, outside=False) for n, rt in self.runtimes.items()}

    def _stored(self, rt: Runtime, *, outside: bool) -> int:
        return 0 if rt.learner_id is None else self.store.sequence_length(rt.learner_id, outside=outside)

    def _runtime(self, wf: Workflow) -> Runtime:
        c = self.config
        if self.machines.shared is not None:
            testbed: Any = RealtimeTestbed(c.testbed.build(), self.machines.shared)
        elif self.pool is not None:
            testbed = c.testbed.build(pool=self.pool)  # the engine's warm tools, not the process's
        else:
            testbed = c.testbed.build()
        self._testbeds.append(testbed)  # a built testbed: the runtime leaves closing it to us
        rt = Runtime(
            wf,
            policy=c.policy,
            store=self.store,
            testbed=testbed,
            round_size=c.round_size,
            explore_fraction=c.explore_fraction,
            seed=c.seed,
        )
        log.info("serving %s (policy %s, %d execution(s) replayed)", wf.name, rt.policy.label, rt.replayed)
        return rt

    # ---- admission ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

    @property
    def draining(self) -> bool:
        return self.admission.draining

    def admit(self, name: str) -> Flight | Refusal:
        """An accepted flight of workflow ``name`` (``start`` runs it), or why not."""
        return self.admission.admit(self.runtime(name).workflow.name)

    def start(self, flight: Flight, inputs: dict[str, Any]) -> concurrent.futures.Future[InvokeResult]:
        """Run ``flight`` in its own thread (the gate bounds how many); its future holds the result."""
        done: concurrent.futures.Future[InvokeResult] = concurrent.futures.Future()

        def work() -> None:
            try:
                done.set_result(self.invoke(flight.name, inputs, flight))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                done.set_exception(e)

        threading.Thread(target=work, name=f"agentsched-invoke-{flight.name}", daemon=True).start()
        return done

    def answered(self, flight: Flight) -> None:
        self.admission.answered(flight)

    def drain(self, timeout_s: float) -> bool:
        return self.admission.drain(timeout_s)

    # ---- invocations ----------------------------------------------------------------------------
    def runtime(self, name: str) -> Runtime:
        rt = self.runtimes.get(name)
        if rt is None:
            raise UnknownWorkflowError(f"unknown workflow {name!r} (served: {', '.join(self.runtimes)})")
        return rt

    def check_inputs(self, name: str, inputs: dict[str, Any]) -> None:
        """One-line ``ToolError`` for inputs no source task takes, or missing ones."""
        wf = self.runtime(name).workflow
        check_input_names(wf, inputs)
        check_inputs_given(wf, inputs, HTTP_HINT)  # (an HTTP caller sends a body, not --input)

    def invoke(self, name: str, inputs: dict[str, Any], flight: Flight | None = None) -> InvokeResult:
        """Run one invocation of ``name`` and record it (blocks; ``start`` runs it in a thread)."""
        rt = self.runtime(name)
        flight = flight or self.admission.track(rt.workflow.name)
        try:
            if self._live(rt):
                res = self._invoke_live(rt, inputs, flight)
            elif self.machines.live is not None and rt.pinned is not None:  # a pin on the live machine's books
                res = self._invoke_live(rt, inputs, flight, rt.pinned)
            else:
                res = rt.invoke(**inputs)
        except AgentschedError:
            cut = self._wait_cut(flight, while_draining=True)
            if cut is not None:  # stopped by the cut: its record and answer are the cut's
                return cut
            raise
        finally:
            self.admission.ended(flight)
        if flight.cut is not None and res is not flight.cut:  # answered by its runtime after the cut: kept twice
            log.warning("invocation %s of %s ended after the shutdown cut it: recorded twice", res.invocation_id, name)
        if res.kind in ("pinned", "live"):
            with self.admission.cond:
                self.outside_runs[name] += 1
        return res

    def _wait_cut(self, flight: Flight, *, while_draining: bool) -> InvokeResult | None:
        """The cut's answer for ``flight``, waited for a moment (None: it was not cut)."""
        with self.admission.cond:
            self.admission.cond.wait_for(
                lambda: flight.cut is not None or (while_draining and not self.admission.draining),
                timeout=CUT_GRACE_S * 4,
            )
        return flight.cut

    def _live(self, rt: Runtime) -> bool:
        """Is this invocation placed task by task on the shared machine (not pinned)?"""
        return self.config.placement is Placement.LIVE and rt.pinned is None

    def _invoke_live(
        self, rt: Runtime, inputs: dict[str, Any], flight: Flight, pinned: dict[str, Mode] | None = None
    ) -> InvokeResult:
        """Run with no mapping (the machine's decider places each task), then record it outside the
        learner's sequence (kind ``live``). The simulated tools take no inputs. On the local
        testbed a pinned mapping runs through the machine too (kind ``pinned``): its tasks are on
        the books the decider reads, as they would be in the simulator."""
        memory = self.machines.contention
        assert memory is not None  # ServiceConfig: live on the real-time simulator or local only
        if self.machines.shared is not None:
            x = self.machines.shared.run(rt.workflow, {})
        else:
            assert self.machines.live is not None
            if not rt.takes_any_input:  # as Runtime.invoke: a user tool's missing input is a one-line error
                check_input_names(rt.workflow, inputs)
            check_inputs_given(rt.workflow, inputs)
            x = rt.testbed.run_live(rt.workflow, self.machines.live.placer(rt.workflow, pinned), inputs=inputs)
        if not flight.claim("result"):  # the shutdown's cut recorded and answered it first: one record
            cut = self._wait_cut(flight, while_draining=False)
            if cut is not None:
                return cut
        res = rt.record(x, "live" if pinned is None else "pinned")
        memory.maybe_save()
        return res

    def cut(self, message: str | None = None) -> int:
        """After the drain's time is up (or at a second signal, ``message`` then saying so): stop every
        runtime's loop, give the invocations answered in that instant ``CUT_GRACE_S`` to say so, then
        record each one still running as ``error`` (kind ``cut``, outside the learner's sequence) and
        answer it with that record. Returns how many were cut. Their tools may still be running:
        nobody waits for them."""
        for rt in self.runtimes.values():
            rt.close(wait_s=0.0, caller_records=True)  # no loop records anything from now on: the cut does
        gate = self.admission
        with gate.cond:
            gate.cond.wait_for(lambda: not gate.running, timeout=CUT_GRACE_S)
            # a flight whose own result is being recorded (live placement claims it) is answered by it
            flights = [f for f in gate.running if f.claim("cut")]
        why = message or f"{CUT_MESSAGE} ({self.config.drain_s:g} s)"
        for flight in flights:
            flight.mark_cut(record_cut(self.runtimes[flight.name], self.store, flight, why))
        with gate.cond:
            self.cut_count += len(flights)
            for flight in flights:  # recorded outside the rounds, as a restart counts them
                self.outside_runs[flight.name] += 1
            gate.cond.notify_all()
        return len(flights)

    def tools_loaded(self) -> int:
        """Tool instances kept loaded by the local testbed's pool (the simulator loads none)."""
        return self.pool.loaded_count() if self.pool is not None else 0

    def close(self) -> None:
        """Close the runtimes, the testbeds and machines built here, and the store (once)."""
        if self._closed:
            return
        self._closed = True
        for rt in self.runtimes.values():  # after the drain and the cut: nothing left to wait for
            rt.close(wait_s=0.0)
        for tb in self._testbeds:
            tb.close()
        self.machines.close()
        self.store.close()


def _engine_pool(config: ServiceConfig, budget: float | None, given: ToolPool | None) -> ToolPool | None:
    """The local testbed's pool of warm tools, under the service's one budget (None off the local
    testbed): ``given`` (its budget and CPU slots set here), else the engine's own."""
    if config.testbed.kind is not TestbedKind.LOCAL:
        return None
    pool = given
    if pool is None:
        pool = ToolPool()
        pool.host_pressure = low_host_memory
    pool.set_budget(budget)
    if config.testbed.cpu_slots is not None:
        # the machine's CPU slots, shared by every invocation (as on the simulator)
        pool.set_cpu_slots(config.testbed.cpu_slots)
    return pool
