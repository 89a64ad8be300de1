"""The service's state, free of HTTP: one learning ``Runtime`` per workflow, one store, admission.

Every workflow gets its own ``Runtime`` (its own loop thread and testbed), so invocations of
different workflows run at once; within a workflow, the runtime runs a round's invocations at once
(runtime/dispatch.py). All runtimes share one ``Store`` (one SQLite connection, its own lock) and
one VRAM budget, the smallest any served workflow declares (or ``--vram-budget-mb`` on the
real-time simulator): on the real-time simulator one ``SharedMachine`` (one simulated GPU, its VRAM
budget and CPU slots); on the local testbed the process's ``ToolPool`` (testbeds/tool_pool.py),
which also keeps every tool loaded between invocations, for every workflow, and with
``--cpu-slots N`` holds the process's N CPU slots, shared by every invocation. Placement: each
workflow's policy chooses a mapping per invocation (``policy``, the default), or ``live``: every
task is placed when it becomes ready by the load-aware planner (``planner/traffic.py``) over the
machine's live state: on the real-time simulator the shared simulated machine's, on the local
testbed the process's (``testbeds/live_machine.py``: the tasks of every invocation in flight, its
VRAM budget and CPU slots). A live invocation is recorded as kind ``live``, outside the learner's
sequence, like a pinned run; a pinned mapping still wins. Admission: at most
``max_concurrency`` invocations accepted at a time, none while draining; the HTTP layer answers
503 to the rest.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError, WorkflowError
from agentsched.model.execution import Execution, Status
from agentsched.model.tool import is_tool_path
from agentsched.model.workflow import Mode, Workflow
from agentsched.planner.traffic import TrafficPlanner
from agentsched.runtime import Runtime
from agentsched.runtime.inputs import HTTP_HINT, check_input_names, check_inputs_given
from agentsched.runtime.runtime import InvokeResult
from agentsched.runtime.setup import check_sim_cards
from agentsched.service.contention_memory import ContentionMemory
from agentsched.service.realtime import RealtimeTestbed, SharedMachine
from agentsched.service.shared_budget import shared_budget, warn_set_aside
from agentsched.store import unwritten
from agentsched.store.records import digest
from agentsched.store.store import Store
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.local import machine_id
from agentsched.testbeds.spec import TestbedKind, TestbedSpec
from agentsched.testbeds.tool_pool import ToolPool, shared_pool

log = logging.getLogger("agentsched.service")

WORKFLOW_SUFFIXES = (".yaml", ".yml")


PLACEMENTS = ("policy", "live")
CUT_MESSAGE = "cut by shutdown after drain-s"
SECOND_SIGNAL_MESSAGE = "cut by a second shutdown signal"
CUT_GRACE_S = 0.5  # after the loops stop: how long an invocation already answered may take to say so


class UnknownWorkflowError(AgentschedError):
    """A request names a workflow the service does not serve (HTTP 404)."""


class Flight:
    """One accepted invocation until it is answered: by its runtime, or by the cut at shutdown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started_s = time.monotonic()
        self.cut: InvokeResult | None = None  # set when the shutdown recorded it as cut
        self._notify: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._owner: str | None = None  # who records it: "result" (its own answer) or "cut", once

    def claim(self, owner: str) -> bool:
        """Take the right to record this invocation (``"result"``: its own answer; ``"cut"``: the
        shutdown's cut record); True for the first claim only: recorded once, never twice (two
        cuts at once, the drain's and a second signal's, included)."""
        with self._lock:
            if self._owner is not None:
                return False
            self._owner = owner
            return True

    def on_cut(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (from any thread) once the flight is cut; at once when it already is."""
        with self._lock:
            self._notify = notify
            done = self.cut is not None
        if done:
            notify()

    def _was_cut(self, result: InvokeResult) -> None:
        with self._lock:
            self.cut = result
            notify = self._notify
        if notify is not None:
            notify()


@dataclass(frozen=True)
class ServiceConfig:
    """What ``agentsched serve`` was asked to serve, and how."""

    workflows: tuple[str, ...]  # workflow files, folders of them, or built-in scenario names
    store: Path
    testbed: TestbedSpec = field(default_factory=TestbedSpec)
    realtime: bool = False  # sim only: tools sleep their simulated durations, on one shared simulated machine
    time_scale: float = 1.0  # realtime: simulated ms per wall ms (10: ten times faster than real time)
    vram_budget_mb: float | None = None  # realtime: the shared GPU's budget (None: the smallest the workflows name)
    policy: str | None = None  # None: each workflow's default (agent-plan / agent-plan-cold)
    placement: str = "policy"  # "policy" (a mapping per invocation) or "live" (per task; realtime sim, local)
    round_size: int = 5
    explore_fraction: float = 0.1
    seed: int = 0
    cards: str | None = None
    max_concurrency: int = 64  # invocations accepted at once (more: 503)
    drain_s: float = 30.0  # SIGTERM: how long in-flight invocations may take to finish

    def __post_init__(self) -> None:
        if self.realtime and not self.testbed.simulated:
            raise AgentschedError("--realtime applies only to --testbed sim")
        if self.placement not in PLACEMENTS:
            raise AgentschedError(f"unknown placement {self.placement!r} (valid: {', '.join(PLACEMENTS)})")
        if self.placement == "live" and not (self.realtime or self.testbed.kind is TestbedKind.LOCAL):
            raise AgentschedError("--placement live needs --testbed local or --testbed sim --realtime (a machine "
                                  "whose live state it reads); other testbeds place by --policy")
        if not self.realtime and (self.time_scale != 1.0 or self.vram_budget_mb is not None):
            raise AgentschedError("--time-scale and --vram-budget-mb apply only to --testbed sim --realtime")
        if not (isinstance(self.time_scale, (int, float)) and math.isfinite(self.time_scale) and self.time_scale > 0):
            raise AgentschedError(f"--time-scale must be a finite number > 0, got {self.time_scale!r}")
        if self.vram_budget_mb is not None and not (isinstance(self.vram_budget_mb, (int, float))
                                                    and math.isfinite(self.vram_budget_mb) and self.vram_budget_mb > 0):
            raise AgentschedError(f"--vram-budget-mb must be a finite number > 0, got {self.vram_budget_mb!r}")
        if isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int) \
                or not 1 <= self.max_concurrency <= 100_000:
            raise AgentschedError(f"--max-concurrency must be an integer in [1, 100000], got {self.max_concurrency!r}")
        if not (isinstance(self.drain_s, (int, float)) and math.isfinite(self.drain_s) and self.drain_s >= 0):
            raise AgentschedError(f"--drain-s must be a finite number >= 0, got {self.drain_s!r}")


def workflow_files(items: tuple[str, ...]) -> list[Workflow]:
    """Each item: a workflow file, a folder (its *.yaml/*.yml files) or a built-in scenario name."""
    from agentsched.scenarios import resolve_workflow

    sources: dict[str, str] = {}  # workflow name -> where it came from
    out: list[Workflow] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in WORKFLOW_SUFFIXES)
            if not files:
                raise WorkflowError(f"folder {item} holds no workflow file (*.yaml, *.yml)")
            found = [(resolve_workflow(str(f)), str(f)) for f in files]
        else:
            found = [(resolve_workflow(item), item)]
        for wf, source in found:
            if wf.name in sources:
                raise WorkflowError(f"two workflows are named {wf.name} ({sources[wf.name]} and {source}): each "
                                    "served workflow needs its own name")
            if "/" in wf.name:  # (it was listed, and no request could reach it)
                raise WorkflowError(f"workflow {wf.name!r} ({source}): a served workflow's name is part of its URL "
                                    "and may not hold a '/'")
            sources[wf.name] = source
            out.append(wf)
    if not out:
        raise WorkflowError("no workflow to serve")
    return out


class Service:
    """Runtimes by workflow name, the shared store, admission and counters. See the module docstring."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        workflows = workflow_files(config.workflows)
        if config.cards:
            workflows = [w.with_cards(config.cards) for w in workflows]
        self.machine: SharedMachine | None = None  # the real-time simulator's one machine
        self.live: LiveMachine | None = None  # live placement on the local testbed: this process as a machine
        self.contention: ContentionMemory | None = None  # live placement's learned contention, kept
        # one GPU serves every workflow: its budget is the smallest any of them declares; each plans for it
        budget, workflows = shared_budget(workflows, config.vram_budget_mb)
        if config.realtime:
            for wf in workflows:
                check_sim_cards(config.testbed, wf)  # the simulator needs real cards
        # the local testbed's tools, warm and under that one budget (the process's pool)
        self.pool: ToolPool | None = shared_pool() if config.testbed.kind is TestbedKind.LOCAL else None
        self._pool_budget = self.pool.budget_mb if self.pool is not None else None  # restored at close
        self._pool_cpu_slots = self.pool.cpu_slots if self.pool is not None else None
        if self.pool is not None and budget is not None:
            self.pool.set_budget(budget)
        if self.pool is not None and config.testbed.cpu_slots is not None:
            # --cpu-slots: the machine's CPU slots, shared by every invocation (as on the simulator)
            self.pool.set_cpu_slots(config.testbed.cpu_slots)
        _import_tool_libraries(workflows, config.testbed)
        self.store = Store(config.store)
        self.runtimes: dict[str, Runtime] = {}
        self._testbeds: list[Any] = []
        try:
            if config.realtime:
                planner = None
                if config.placement == "live":  # starts from what it learned before a restart
                    # why the world in the key: on the simulator it is the machine (another law, other contention)
                    world = config.testbed.world
                    self.contention = ContentionMemory(self.store, workflows,
                                                       digest(world.model_dump(mode="json")) if world else "")
                    planner = TrafficPlanner(learned=self.contention.load(), ratios=self.contention.restored_ratios)
                self.machine = SharedMachine(workflows, config.testbed, vram_budget_mb=budget,
                                             time_scale=config.time_scale, decider=planner)
                if self.contention is not None and planner is not None:
                    self.contention.attach(planner, self.machine)
            elif config.placement == "live":
                self.live = self._local_machine(workflows, budget)
            for wf in workflows:
                self.runtimes[wf.name] = self._runtime(wf)
            if self.live is not None:
                for rt in self.runtimes.values():
                    _check_live_cards(rt.workflow)
            warn_set_aside(self.store, self.runtimes)
        except BaseException:
            self.close()
            raise
        self._cond = threading.Condition()
        self.in_flight = 0  # accepted, not yet answered
        self.draining = False
        self._flights: set[Flight] = set()  # invocations running now (for the cut at shutdown)
        self.cut_count = 0  # invocations the shutdown cut (recorded as error)
        # pinned, live and cut invocations, outside the rounds: those of earlier processes, then ours
        self.outside_runs: dict[str, int] = {name: 0 if rt.learner_id is None else
                                             self.store.sequence_length(rt.learner_id, outside=True)
                                             for name, rt in self.runtimes.items()}
        # the learner's sequence as stored at start: while the replay goes on (the loop thread's work; a trial
        # saw 116 of 203 stored invocations replayed at first) `invocations` still counts every one recorded
        self.stored_runs: dict[str, int] = {name: 0 if rt.learner_id is None else
                                            self.store.sequence_length(rt.learner_id)
                                            for name, rt in self.runtimes.items()}

    def _local_machine(self, workflows: list[Workflow], budget: float | None) -> LiveMachine:
        """Live placement on the local testbed: the process's tasks, its VRAM budget and CPU slots
        (``--cpu-slots``, else one per core: the pool's slots then hold every run's CPU tasks, so
        what the planner counts is what waits)."""
        assert self.pool is not None
        slots = self.config.testbed.cpu_slots or os.cpu_count() or 1
        self.pool.set_cpu_slots(slots)
        # keyed by the cards (as profiled) and the machine: moved to another GPU, its units start afresh
        self.contention = ContentionMemory(self.store, workflows, machine_id())
        planner = TrafficPlanner(learned=self.contention.load(), ratios=self.contention.restored_ratios)
        live = LiveMachine(planner, workflows, vram_budget_mb=budget, cpu_slots=slots, seed=self.config.seed)
        self.contention.attach(planner, live)
        return live

    def _runtime(self, wf: Workflow) -> Runtime:
        c = self.config
        testbed: Any = c.testbed
        if self.machine is not None:
            testbed = RealtimeTestbed(c.testbed.build(), self.machine)
            self._testbeds.append(testbed)  # a built testbed: the runtime leaves closing it to us
        rt = Runtime(wf, policy=c.policy, store=self.store, testbed=testbed, round_size=c.round_size,
                     explore_fraction=c.explore_fraction, seed=c.seed)
        log.info("serving %s (policy %s, %d execution(s) replayed)", wf.name, rt.policy.label, rt.replayed)
        return rt

    # ---- admission ------------------------------------------------------------------------------
    def admit(self) -> str | None:
        """Take one invocation slot; None when taken, else why not ("draining" or "busy")."""
        with self._cond:
            if self.draining:
                return "draining"
            if self.in_flight >= self.config.max_concurrency:
                return "busy"
            self.in_flight += 1
            return None

    def release(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Refuse new invocations, then wait up to ``timeout_s`` for the accepted ones; True when none is left."""
        with self._cond:
            self.draining = True
            return self._cond.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)

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

    def begin(self, name: str) -> Flight:
        """Register an accepted invocation of ``name`` (``invoke`` runs it)."""
        flight = Flight(self.runtime(name).workflow.name)
        with self._cond:
            self._flights.add(flight)
        return flight

    def invoke(self, name: str, inputs: dict[str, Any], flight: Flight | None = None) -> InvokeResult:
        rt = self.runtime(name)
        flight = flight or self.begin(name)
        try:
            if self._live(rt):
                res = self._invoke_live(rt, inputs, flight)
            elif self.live is not None and rt.pinned is not None:  # a pin on the live machine's books
                res = self._invoke_live(rt, inputs, flight, rt.pinned)
            else:
                res = rt.invoke(**inputs)
        except AgentschedError:
            with self._cond:  # stopped by the cut: its record and answer are the cut's
                if self._cond.wait_for(lambda: flight.cut is not None or not self.draining, timeout=CUT_GRACE_S * 4) \
                        and flight.cut is not None:
                    return flight.cut
            raise
        finally:
            with self._cond:
                self._flights.discard(flight)
                self._cond.notify_all()
        if flight.cut is not None and res is not flight.cut:  # answered by its runtime after the cut: kept twice
            log.warning("invocation %s of %s ended after the shutdown cut it: recorded twice", res.invocation_id,
                        name)
        if res.kind in ("pinned", "live"):
            with self._cond:
                self.outside_runs[name] += 1
        return res

    def _live(self, rt: Runtime) -> bool:
        """Is this invocation placed task by task on the shared machine (not pinned)?"""
        return self.config.placement == "live" and rt.pinned is None

    def _invoke_live(self, rt: Runtime, inputs: dict[str, Any], flight: Flight,
                     pinned: dict[str, Mode] | None = None) -> InvokeResult:
        """Run with no mapping (the machine's planner places each task), then record it outside the
        learner's sequence (kind ``live``). The simulated tools take no inputs. On the local
        testbed a pinned mapping runs through the machine too (kind ``pinned``): its tasks are on
        the books the planner reads, as they would be in the simulator."""
        assert self.contention is not None  # ServiceConfig: live on the real-time simulator or local only
        if self.machine is not None:
            x = self.machine.run(rt.workflow, {})
        else:
            assert self.live is not None
            rt._check_inputs(inputs)  # as Runtime.invoke: a user tool's missing input is a one-line error
            x = rt.testbed.run_live(rt.workflow, self.live.placer(rt.workflow, pinned), inputs=inputs)
        if not flight.claim("result"):  # the shutdown's cut recorded and answered it first: one record
            with self._cond:
                self._cond.wait_for(lambda: flight.cut is not None, timeout=CUT_GRACE_S * 4)
            if flight.cut is not None:
                return flight.cut
        res = rt.record(x, "live" if pinned is None else "pinned")
        self.contention.maybe_save()
        return res

    def cut(self, message: str | None = None) -> int:
        """After the drain's time is up (or at a second signal, ``message`` then saying so): stop every
        runtime's loop, give the invocations answered in that instant ``CUT_GRACE_S`` to say so, then
        record each one still running as ``error`` (``CUT_MESSAGE``, kind ``cut``, outside the
        learner's sequence) and answer it with that record. Returns how many were cut. Their tools
        may still be running: nobody waits for them."""
        for rt in self.runtimes.values():
            rt.close(wait_s=0.0, caller_records=True)  # no loop records anything from now on: the cut does
        with self._cond:
            self._cond.wait_for(lambda: not self._flights, timeout=CUT_GRACE_S)
            # a flight whose own result is being recorded (live placement claims it) is answered by it
            flights = [f for f in self._flights if f.claim("cut")]
        for flight in flights:
            flight._was_cut(self._record_cut(flight, message or f"{CUT_MESSAGE} ({self.config.drain_s:g} s)"))
        with self._cond:
            self.cut_count += len(flights)
            for flight in flights:  # recorded outside the rounds, as a restart counts them
                self.outside_runs[flight.name] += 1
            self._cond.notify_all()
        return len(flights)

    def _record_cut(self, flight: Flight, message: str) -> InvokeResult:
        rt = self.runtimes[flight.name]
        elapsed_ms = (time.monotonic() - flight.started_s) * 1000.0
        # the mapping it ran under is the dispatcher's, not known here: recorded as none
        x = Execution(status=Status.ERROR, mapping={}, e2e_ms=None, elapsed_ms=elapsed_ms, peak_vram_mb=0.0,
                      spans=(), message=message, testbed=rt.testbed.name)
        invocation_id = None
        if rt.learner_id is not None:
            try:
                invocation_id, _ = self.store.append(rt.learner_id, None, "cut", None, x)
            except AgentschedError as e:  # the store failing now: kept on disk for the next open, and said
                kept = unwritten.execution_record(rt.learner_key, None, "cut", None, x)
                where = unwritten.keep(self.store.path, [kept])
                log.error("could not record a cut invocation of %s now (%s): %s", flight.name, e,
                          f"kept in {where}; the next store opened at that path writes it" if where else "lost")
        return InvokeResult(outputs={}, mapping={}, e2e_ms=None, timeline=(), status=Status.ERROR, message=message,
                            invocation_id=invocation_id, kind="cut", round=None)

    # ---- views ----------------------------------------------------------------------------------
    def describe(self, name: str) -> dict[str, Any]:
        rt = self.runtime(name)
        best = rt.best
        live = rt.pinned is None and self.config.placement == "live"  # no mapping: each task placed when ready
        return {"name": name, "policy": rt.policy.label, "tasks": list(rt.workflow.task_ids),
                "pinned": rt.pinned is not None, "current_mapping": None if live else _modes(rt.pinned or rt.current),
                "best_mapping": _modes(best[1]) if best else None, "best_e2e_ms": best[0] if best else None,
                "invocations": max(rt.executions, self.stored_runs[name]) + self.outside_runs[name],
                "replayed": rt.replayed,
                "placement": "pinned" if rt.pinned is not None else self.config.placement,
                # no CUDA here: every GPU placement (a pinned gpu_now too) runs as host code on the CPU
                "host_only": rt.host_only, "learner": rt.learner_id}

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        rt = self.runtime(name)
        # the newest ``limit`` read with SQL LIMIT: a long-lived learner holds millions of rows
        rows = self.store.executions(rt.learner_id, limit=limit) if rt.learner_id is not None else []
        return [{"invocation_id": r.id, "seq": r.seq, "kind": r.kind, "round": r.round, "mapping": r.mapping,
                 "status": r.status, "e2e_ms": r.e2e_ms, "message": r.message} for r in rows]

    def tools_loaded(self) -> int:
        """Tool instances kept loaded by the local testbed's pool (the simulator loads none)."""
        return self.pool.loaded_count() if self.pool is not None else 0

    def close(self) -> None:
        """Close the runtimes, the testbeds built here and the store (once)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        for rt in self.runtimes.values():  # after the drain and the cut: nothing left to wait for
            rt.close(wait_s=0.0)
        for tb in self._testbeds:
            tb.close()
        if self.machine is not None:
            self.machine.close()
        if self.live is not None:
            self.live.close()
        if self.contention is not None:
            self.contention.save()  # never raises: the pool and the store below are still closed
        if self.pool is not None:
            self.pool.set_budget(self._pool_budget)
            self.pool.set_cpu_slots(self._pool_cpu_slots)
        self.store.close()


def _check_live_cards(wf: Workflow) -> None:
    """Refuse live placement of a GPU tool with no card: the planner would place it from placeholder
    times (equal on both devices), so it would never leave the CPU and never be measured on the GPU.
    (Without CUDA the runtime already runs every tool as host code: nothing to refuse.)"""
    tasks = sorted(t for t in wf.unprofiled if wf.task_cards[t].has_gpu)
    if tasks:
        tools = sorted({wf.tasks[t].tool for t in tasks})
        raise AgentschedError(f"--placement live needs profiled cards for GPU tools, but task(s) {', '.join(tasks)} "
                              f"of workflow {wf.name} have none (the planner would place them from placeholder "
                              f"times): profile them with `agentsched profile --tools {','.join(tools)} --out "
                              f"cards.json` and pass --cards cards.json")


def _import_tool_libraries(workflows: list[Workflow], spec: TestbedSpec) -> None:
    """Import the built-in tools' libraries once, here, before invocations run in many threads: two
    threads importing transformers for the first time at once can find it half-initialised ("cannot
    import name ... from partially initialized module transformers.utils"), failing a tool's load."""
    if spec.simulated or all(is_tool_path(t.tool) for w in workflows for t in w.tasks.values()):
        return
    for module in ("torch", "transformers"):
        try:
            importlib.import_module(module)
        except ImportError:  # the tools extra is missing: each tool says so when it loads
            return


def _modes(mapping: dict[str, Any] | None) -> dict[str, str] | None:
    return None if mapping is None else {t: getattr(m, "value", m) for t, m in mapping.items()}


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: non-finite floats as null, anything JSON cannot hold as its repr."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    try:
        return jsonable(json.loads(json.dumps(value)))
    except (TypeError, ValueError):
        text = repr(value)
        return text if len(text) <= 2000 else text[:1997] + "..."
