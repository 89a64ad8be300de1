"""The runtime: run a workflow of real tools on demand and learn its placement across invocations.

``Runtime(workflow, policy=..., store=...)`` then ``invoke(**inputs)`` any number of times. Each
invocation is one execution of the online loop (``loop.runner.run_loop``, the same loop ``run`` and
``bench`` use): one mapping serves ``round_size`` invocations (a round); the policy observes the
round and proposes the next mapping. What-ifs and reprobes the monitor asks for are answered by
live invocations too (the caller's own inputs run under the what-if mapping), never by extra
work, and only within an exploration budget: a probe may run while probes stay at most
``explore_fraction`` of all invocations.

How it keeps the one loop: ``run_loop`` runs on a background thread against a *live* testbed
whose ``run(workflow, mapping)`` waits for the next ``invoke()``, executes that invocation for real
under ``mapping`` and returns its ``Execution``. A tool that raises or runs out of memory makes that
invocation's status ``error``/``oom`` with a one-line message; the runtime carries on (the loop
sees a failed execution of that mapping, as in any run).

Persistence and resuming (``store``; ``runtime/history.py``): every execution is appended to the
learner's sequence in the store. A new runtime on the same store and settings *replays* that
sequence: the loop runs again from round 0 and each execution it asks for is answered from the
store instead of being run, so the policy (deterministic given its seed and the executions it saw)
reaches exactly the state it had, then continues live. Two processes on one learner share its
sequence the same way: a place another process recorded first is replayed, and one's own execution
at that place is kept in the history outside the sequence. A policy that does not reproduce its
choices (an LLM: ``Policy.reproducible`` is False) is not asked again for a stored round: the
replay takes that round's stored mapping, so a model is asked only for the rounds it runs live;
where a stored round is missing and its new answer differs from the stored executions, the replay
stops there and continues live (logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError, StoreError, Terminated
from agentsched.loop.runner import ENDLESS_KEEP_ROUNDS, RoundRecord, noise_at, run_loop
from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies.base import Policy
from agentsched.runtime.dispatch import Dispatcher, Stopped, _Tracked
from agentsched.runtime.history import LearnerHistory
from agentsched.runtime.setup import (
    build_policy,
    build_workflow,
    check_round_settings,
    check_runtime_arguments,
    check_sim_cards,
    host_only_where_needed,
)
from agentsched.store.store import Store
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import TestbedKind, TestbedSpec, as_spec

log = logging.getLogger("agentsched.runtime")
CLOSE_WAIT_S = 60.0  # close() waits this long for invocations running to end and be recorded
INTERRUPTED = "interrupted (Ctrl-C) while it ran: its tool calls were abandoned"
TERMINATED = "terminated (SIGTERM) while it ran: its tool calls were abandoned"


@dataclass(frozen=True)
class InvokeResult:
    """What one invocation returns."""

    outputs: dict[str, Any]  # sink task id -> its output (empty when the invocation failed)
    mapping: dict[str, Mode]  # the placement it ran under
    e2e_ms: float | None  # end-to-end latency; None when it failed
    timeline: tuple[dict[str, Any], ...]  # per-task spans (task, tool, mode, ready/start/end ms...)
    status: Status  # ok, error (a tool raised) or oom
    message: str  # the one-line error ("" when ok)
    invocation_id: int | None  # its id in the store (None without a store)
    kind: str = "round"  # "round" (the round's mapping), "probe" (a what-if of the monitor), "pinned", "live"
    round: int | None = 0  # the round it belongs to (None: run outside the rounds: pinned, live, cut)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


_Stopped = Stopped  # unwinds the loop thread when the runtime closes


class _LiveTestbed(Testbed):
    """The testbed the loop sees: each run is the next invocation (or a stored one, replayed)."""

    name = "live"
    deterministic = False

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def run(
        self, workflow: Workflow, mapping: Any, *, rng: random.Random | None = None, inputs: Any = None
    ) -> Execution:
        return self.rt._serve(dict(mapping), rng)


class Runtime:
    """Run a workflow on demand and learn where each task runs best. See the module docstring."""

    _join_s = 60.0  # close() waits this long for the loop thread to end

    def __init__(
        self,
        workflow: Workflow | str | Path,
        policy: str | Policy | None = None,
        store: str | Path | Store | None = "agentsched.db",
        testbed: TestbedSpec | TestbedKind | str | Testbed = TestbedKind.LOCAL,
        *,
        round_size: int = 5,
        explore_fraction: float = 0.1,
        seed: int = 0,
        cards: str | None = None,
        policy_options: dict[str, Any] | None = None,
        on_store_wait: Callable[[str], None] | None = None,
    ) -> None:
        """``policy``: a registry name or a ``Policy`` (None: ``agent-plan``, or ``agent-plan-cold``
        when a task has no card); ``testbed``: a ``TestbedSpec``, a kind name as shorthand for that
        kind's default spec (``"local"``, ``"sim"``, ``"ray"``), or a built ``Testbed`` (the caller
        closes it)."""
        check_round_settings(round_size, explore_fraction)
        check_runtime_arguments(seed, store, policy_options)
        self.workflow = build_workflow(workflow, cards)  # what runs
        self.round_size = round_size  # invocations per round (one mapping each)
        self.explore_fraction = float(explore_fraction)  # share of invocations probes may take
        self.seed = seed  # seed of the policy's randomness (and of the sim testbed's noise)
        spec = None if isinstance(testbed, Testbed) else as_spec(testbed)  # a kind name: its default spec
        check_sim_cards(spec if spec is not None else testbed, self.workflow)
        self.policy = _Tracked(build_policy(policy, self.workflow, policy_options))
        self._own_testbed = not isinstance(testbed, Testbed)
        # where invocations really run (a spec is built here; the runtime closes what it built)
        self.testbed = spec.build() if spec is not None else testbed
        self.takes_any_input = False  # True: inputs are not checked by name (a LangGraph graph's state)
        self.store: Store | None = None
        self._own_store = False
        self.history: LearnerHistory | None = None  # the learner's sequence in the store (None: no store)
        try:  # (the testbed this runtime built is closed again when any of this fails)
            self.host_only, self.workflow = host_only_where_needed(self.testbed, self.workflow)
            self.testbed.preflight(self.workflow)
            self.policy.preflight(self.workflow)
            if store is not None:
                self._own_store = not isinstance(store, Store)
                self.store = store if isinstance(store, Store) else Store(store, on_wait=on_store_wait)
                settings = {
                    "round_size": round_size,
                    "explore_fraction": self.explore_fraction,
                    "seed": seed,
                    "testbed": self.testbed.name,
                }
                self.history = LearnerHistory(self.store, self.workflow, self.policy.label, settings)
                self.policy.recorded = self.history.recorded_round
        except BaseException:
            self._release()
            raise
        # executions the loop has been served (replayed or live), and how many were probes
        self.executions = 0
        self.probes = 0
        self.replayed = 0  # executions answered from the store
        # the last rounds observed by this process's loop (replays too); the store keeps every one
        self.records: deque[RoundRecord] = deque(maxlen=ENDLESS_KEEP_ROUNDS)
        # concurrent invoke()s: a round's runs run at once in their callers' threads (runtime/dispatch.py)
        self._dispatch = Dispatcher()
        self._round_pos = 0  # the next round run's position in its round
        self._rng: random.Random | None = None  # the loop's noise stream, for runs in callers' threads
        # a testbed that is not safe for concurrent runs (one Driver state) runs one at a time
        self._run_lock = None if getattr(self.testbed, "concurrent_runs", False) else threading.Lock()
        self._pinned: dict[str, Mode] | None = None  # pin(): every invocation runs this, outside the loop
        self._outside = 0  # pinned runs in progress (callers' threads): close() waits for their records
        self._outside_cond = threading.Condition()
        self._gave_up = False  # close() stopped waiting for the pinned runs in progress
        self._close_done = threading.Event()
        self.best: tuple[float, dict[str, Mode]] | None = None  # best observed round (median E2E, mapping)
        self.current: dict[str, Mode] | None = None  # the mapping of the round being run
        self._error: BaseException | None = None  # why the loop stopped, if it did
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="agentsched-runtime", daemon=True)
        self._thread.start()

    # ---- public ----------------------------------------------------------------------------
    def invoke(self, **inputs: Any) -> InvokeResult:
        """Run the workflow once on ``inputs`` (given to every source task) and return its sinks'
        outputs, the mapping, E2E and timeline. A failing tool gives a failed result, not an
        exception; bad inputs and an unusable store are one-line ``AgentschedError``s."""
        self._check_inputs(inputs)
        if self._closed:
            raise AgentschedError("runtime is closed")
        if isinstance(self._error, StoreError):  # e.g. a history it cannot replay: the line says what to do
            raise self._error
        if self._error is not None:
            raise AgentschedError(f"runtime stopped: {self._error}")
        pinned = self._pinned
        if pinned is not None:
            return self._invoke_pinned(pinned, inputs)
        return self._dispatch.submit(inputs, lambda mapping, given: self._execute(mapping, given, self._rng))

    async def ainvoke(self, **inputs: Any) -> InvokeResult:
        """``invoke`` for asyncio: runs in a worker thread, so the event loop stays free."""
        return await asyncio.to_thread(self.invoke, **inputs)

    @property
    def in_flight(self) -> int:
        """Invocations accepted and not yet answered (waiting or running)."""
        return self._dispatch.in_flight

    @property
    def learner_id(self) -> int | None:
        """The learner's id in the store (None without a store)."""
        return None if self.history is None else self.history.learner_id

    @property
    def learner_key(self) -> str:
        """The learner's key in the store (how records kept on disk name it; "" without a store)."""
        return "" if self.history is None else self.history.learner_key

    @property
    def diverged_at(self) -> int | None:
        """The place where a replay disagreed with the policy (None: it did not)."""
        return None if self.history is None else self.history.diverged_at

    def pin(self, mapping: dict[str, Mode | str] | str) -> dict[str, Mode]:
        """Run every later invocation under ``mapping`` (task -> mode, or the text ``A=gpu_now,B=cpu``)
        and stop learning (``unpin`` resumes). Pinned
        invocations are kept in the store outside the learner's sequence (kind ``pinned``), so the
        policy's state, and a replay of it, are as if they had not happened."""
        from agentsched.model.mapping import validate_mapping

        self._pinned = dict(validate_mapping(self.workflow, mapping))
        return dict(self._pinned)

    def unpin(self) -> None:
        self._pinned = None

    @property
    def pinned(self) -> dict[str, Mode] | None:
        return None if self._pinned is None else dict(self._pinned)

    def close(self, wait_s: float = CLOSE_WAIT_S, *, caller_records: bool = False) -> None:
        """Refuse new invocations, let those running end and be recorded (for at most ``wait_s``;
        after it they fail with "runtime is closed" and their records are lost, which is logged
        unless ``caller_records``: the caller records them itself, as the service's cut does),
        then stop the loop, unload the tools, close the store."""
        with self._outside_cond:
            first = not self._closed
            self._closed = True
        if not first:  # a second close returns once the first is done (the store may be shared)
            self._close_done.wait(wait_s + 60.0)
            return
        try:
            self._close_after(wait_s, caller_records)
        finally:
            self._close_done.set()

    def _close_after(self, wait_s: float, caller_records: bool) -> None:
        closed = AgentschedError("runtime is closed")
        deadline = time.monotonic() + wait_s
        left = self._dispatch.drain(closed, wait_s)
        with self._outside_cond:
            self._outside_cond.wait_for(lambda: self._outside == 0, max(0.0, deadline - time.monotonic()))
            left += self._outside
            self._gave_up = True  # a pinned run ending from now on is not recorded (the service's cut has)
        if left and not caller_records:
            log.warning(
                "runtime of %s closed with %d invocation(s) still running after %g s: they fail and are not recorded",
                self.workflow.name,
                left,
                wait_s,
            )
        self._dispatch.stop(closed)
        self._thread.join(timeout=self._join_s)
        self._release()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._join_s = 1.0  # a Ctrl-C waits for no tool that will not stop (a probe's, on the loop thread)
            self.close(0.0)
        else:
            self.close()

    # ---- checks ----------------------------------------------------------------------------
    def _check_inputs(self, inputs: dict[str, Any]) -> None:
        from agentsched.runtime.inputs import check_input_names, check_inputs_given

        if not self.takes_any_input:  # a misspelt name is refused, as the CLI and the service refuse it
            check_input_names(self.workflow, inputs)
        check_inputs_given(self.workflow, inputs)

    # ---- the loop thread -------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            run_loop(
                self.workflow,
                self.policy,
                _LiveTestbed(self),
                rounds=None,  # until closed
                repeats=self.round_size,
                seed=self.seed,
                on_round=self._on_round,
                probe_allowed=self._probe_allowed,
            )
        except _Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - handed to every waiting and later invoke()
            if (
                self.replayed
                and self.replayed == self.executions
                and isinstance(e, Exception)
                and not isinstance(e, AgentschedError)
            ):  # (a Ctrl-C says nothing of the history)
                assert self.history is not None  # (only a stored history is replayed)
                e = self.history.unreplayable(e, self.replayed)  # every later runtime here would fail the same way
            self._error = e
            self._dispatch.stop(
                e if isinstance(e, AgentschedError) else AgentschedError(f"runtime stopped: {type(e).__name__}: {e}")
            )

    def _probe_allowed(self) -> bool:
        # one more probe keeps probes within their share of every invocation (itself included)
        return self.probes + 1 <= self.explore_fraction * (self.executions + 1) + 1e-9

    def _on_round(self, rec: RoundRecord) -> None:
        self.records.append(rec)
        r = rec.result
        if r.e2e_ms is not None and r.status is Status.OK and (self.best is None or r.e2e_ms < self.best[0]):
            self.best = (r.e2e_ms, dict(r.mapping))
        if self.history is not None:
            self.history.add_round(rec)

    def _serve(self, mapping: dict[str, Mode], rng: random.Random | None) -> Execution:
        """The next execution the loop asks for: stored (replay) or the next invocation's."""
        kind = "probe" if self.policy.in_policy else "round"
        seq = self.executions
        runs_left = 1
        if kind == "round":  # the loop runs a round's round_size runs back to back (loop/runner.py)
            self.current = dict(mapping)
            runs_left = self.round_size - self._round_pos
            self._round_pos = (self._round_pos + 1) % self.round_size
        # why not the store inside an open round: its slots were handed to invocations that run now
        # and wait for the loop; a stored run (another process recorded this place) taking one's
        # place would leave a slot open for the next round, run under this round's mapping (or wait
        # forever while the policy probes). The place's record is still learned at append below.
        opened = kind == "round" and self._dispatch.round_open
        stored = None if opened or self.history is None else self.history.stored(seq, mapping)
        if stored is not None:
            self.replayed += 1
            return self._count(kind, stored)
        # why per place: the loop's one stream restarts in every process while stored runs are
        # replayed without drawing, so each `invoke` process drew the same noise (identical E2Es)
        rng = None if rng is None else noise_at(self.seed, seq)
        self._rng = rng
        if kind == "round":  # run in its caller's thread, at once with the rest of the round
            req = self._dispatch.next_slot(mapping, runs_left)
            x = req.execution
            if isinstance(x, BaseException):  # the loop stops on it, and its caller is told
                req.finish(error=_stopped_by(x))
                raise x
        else:  # a probe: run here, one at a time
            req = self._dispatch.take()
            try:
                x = self._execute(mapping, req.inputs, rng)
            except BaseException as e:
                req.finish(error=_stopped_by(e))
                raise
        invocation_id, served = None, x
        if self.history is not None:
            invocation_id, served = self.history.append(seq, kind, x, mapping, self.policy.round)
        req.finish(result=self._result(x, invocation_id, kind, self.policy.round))
        return self._count(kind, served)

    def _result(self, x: Execution, invocation_id: int | None, kind: str, round_index: int | None) -> InvokeResult:
        sinks = {t: x.outputs[t] for t in self.workflow.sinks if t in x.outputs} if x.ok else {}
        return InvokeResult(
            outputs=sinks,
            mapping=dict(x.mapping),
            e2e_ms=x.e2e_ms,
            timeline=tuple(s.to_dict() for s in x.spans),
            status=x.status,
            message=x.message,
            invocation_id=invocation_id,
            kind=kind,
            round=round_index,
        )

    def _invoke_pinned(self, mapping: dict[str, Mode], inputs: dict[str, Any]) -> InvokeResult:
        with self._outside_cond:  # counted before it starts, so that close() waits for its record
            if self._closed:
                raise AgentschedError("runtime is closed")
            self._outside += 1
        try:
            x = self._execute(mapping, inputs, None)
        except BaseException:
            self._outside_done()
            raise
        with self._outside_cond:
            self._outside_done()
            if self._gave_up:  # close() stopped waiting for it: as a round's run then, it fails unrecorded
                raise AgentschedError("runtime is closed")
            return self.record(x, "pinned")  # under the lock: close() cannot give up on it meanwhile

    def _outside_done(self) -> None:
        with self._outside_cond:  # re-entrant (a Condition's default lock is an RLock)
            self._outside -= 1
            self._outside_cond.notify_all()

    def record(self, x: Execution, kind: str) -> InvokeResult:
        """Keep an execution run outside the learner's rounds (a pinned run; a live-placed one of the
        service) in the store, outside the learner's sequence, and answer it."""
        invocation_id = None if self.history is None else self.history.record(x, kind)
        return self._result(x, invocation_id, kind, None)  # outside the rounds, as its history row says

    def _count(self, kind: str, x: Execution) -> Execution:
        self.executions += 1
        if kind == "probe":
            self.probes += 1
        return x

    def _execute(self, mapping: dict[str, Mode], inputs: dict[str, Any], rng: random.Random | None) -> Execution:
        t0 = time.monotonic()
        try:
            if self._run_lock is None:
                return self.testbed.run(self.workflow, mapping, rng=rng, inputs=inputs)
            with self._run_lock:
                return self.testbed.run(self.workflow, mapping, rng=rng, inputs=inputs)
        except AgentschedError as e:  # the testbed refused this mapping (e.g. no GPU): a failed invocation
            return self._failed(mapping, 0.0, str(e))
        except KeyboardInterrupt as e:  # kept, outside the learner's sequence, as the service keeps a cut one
            why = TERMINATED if isinstance(e, Terminated) else INTERRUPTED
            with contextlib.suppress(AgentschedError):
                self.record(self._failed(mapping, (time.monotonic() - t0) * 1000, why), "cut")
            raise

    def _failed(self, mapping: dict[str, Mode], elapsed_ms: float, message: str) -> Execution:
        return Execution(
            status=Status.ERROR,
            mapping=dict(mapping),
            e2e_ms=None,
            elapsed_ms=elapsed_ms,
            peak_vram_mb=0.0,
            spans=(),
            message=message,
            testbed=self.testbed.name,
        )

    def _release(self) -> None:
        try:
            self.policy.close()
        except Exception:  # noqa: BLE001 - closing must not hide the reason we stopped
            pass
        if self._own_testbed:
            self.testbed.close()
        if self.history is not None:
            self.history.writes.close()
        if self.store is not None and self._own_store:
            self.store.close()


def _stopped_by(e: BaseException) -> BaseException:
    """What the caller of a run that raised ``e`` (not a failed tool: a testbed bug, a Ctrl-C in its
    thread) gets: a Ctrl-C or an exit as it is, anything else as one line."""
    return e if not isinstance(e, Exception) else AgentschedError(f"runtime stopped: {type(e).__name__}: {e}")
