"""Prediction: E2E and peak VRAM of a mapping under a fitted model, by a discrete-event run of the
same start rules as every testbed (``testbeds.rules.Dispatcher``) and the same contention law
(``testbeds.contention.gpu_rates``).

The model here is a table of per-task figures (``TaskParams``) that the planner estimated; nothing
comes from the testbed's world. Between events, CPU tasks and queue loads progress at rate 1 and
GPU tasks at their contention rate, as in the simulator, so given the simulator's own figures the
prediction equals its noise-free execution (a test checks it on random DAGs).

Speed: CPU tasks and loads are kept as absolute end times in a heap, so an event costs a pass over
the GPU tasks running at that moment only; results are cached per mapping.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentsched.errors import PolicyError
from agentsched.model.contention import gpu_rates
from agentsched.model.rules import Dispatcher, Infeasible
from agentsched.model.workflow import Mode, Workflow
from agentsched.planner.vram import feasibility_distance, timing_slack

_EPS = 1e-9  # the simulator's relative tolerance for "this task has finished"

Key = tuple[Mode, ...]


@dataclass(frozen=True, slots=True)
class TaskParams:
    """The planner's estimate of one task (one tool x repeat)."""

    cpu_ms: float  # isolated latency on the CPU
    gpu_ms: float | None  # isolated latency on the GPU; None: no GPU implementation
    load_ms: float  # load-in a gpu_queue admission pays
    vram_mb: float  # VRAM held while on the GPU
    sensitivity: float  # how much the task slows per unit of foreign GPU pressure
    pressure: float  # how much GPU it takes from others

    # the three attributes the Dispatcher reads from a card
    @property
    def has_gpu(self) -> bool:
        return self.gpu_ms is not None

    @property
    def vram_needed_mb(self) -> float:
        return self.vram_mb if self.gpu_ms is not None else 0.0

    @property
    def load_needed_ms(self) -> float:
        return self.load_ms if self.gpu_ms is not None else 0.0


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the model expects of one mapping."""

    e2e_ms: float | None  # None: the start rules say it runs out of VRAM
    peak_vram_mb: float  # max VRAM held (for an infeasible mapping: what the failing start needed)
    failed_task: str | None = None  # the start that breaks the budget
    overlap: float = 0.0  # share of the E2E GPU tasks lost to each other: sum of (1 - rate) dt / E2E
    timing_slack: float = math.inf  # relative timing error under which it may run out of VRAM (``vram.py``)
    # robust mode, predicted infeasible: the E2E were every start to fit, and the relative timing error
    # under which they all would (``vram.feasibility_distance``; inf: none)
    e2e_if_fits_ms: float | None = None
    infeasible_by: float = math.inf
    holds: dict[str, tuple[float, float, float]] | None = None  # GPU task -> (start, end, vram) when kept

    @property
    def feasible(self) -> bool:
        return self.e2e_ms is not None


@dataclass(frozen=True, slots=True)
class Timeline:
    """A predicted execution, task by task (for the search's critical-path moves)."""

    prediction: Prediction
    start_ms: dict[str, float]  # when each started task started
    end_ms: dict[str, float]  # when each finished task finished
    ready_ms: dict[str, float]  # when each task's predecessors were done


class Predictor:
    """Evaluates mappings of one workflow under one table of ``TaskParams``; caches by mapping."""

    def __init__(
        self,
        workflow: Workflow,
        params: Mapping[str, TaskParams],
        *,
        cpu_slots: int | None = None,
        cache_size: int = 200_000,
        robust: bool = False,
        vram_margin_mb: float = 0.0,
        keep_holds: bool = False,
    ) -> None:
        missing = [t for t in workflow.task_ids if t not in params]
        if missing:
            raise PolicyError(f"predictor: no estimate for task(s) {', '.join(missing)}")
        self.workflow = workflow
        self.params = dict(params)
        self.cpu_slots = cpu_slots
        self.ids = workflow.task_ids
        self._index = {t: i for i, t in enumerate(self.ids)}
        self._cache: dict[Key, Prediction] = {}
        self._cache_size = cache_size
        self.evaluations = 0  # discrete-event runs done (cache misses)
        # robust: also compute each mapping's timing slack (``vram.timing_slack``)
        self.robust = robust
        self.vram_margin_mb = vram_margin_mb
        self.keep_holds = keep_holds  # keep each prediction's GPU holding intervals (conflicts judge them)

    def key(self, mapping: Mapping[str, Mode]) -> Key:
        return tuple(mapping[t] for t in self.ids)

    def predict(self, mapping: Mapping[str, Mode] | Key) -> Prediction:
        """Expected E2E and peak VRAM of ``mapping`` (a task->mode dict or a key in task order)."""
        key = mapping if isinstance(mapping, tuple) else self.key(mapping)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        pred = self._run(dict(zip(self.ids, key, strict=True)), None)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()  # why: a bounded memory footprint beats an LRU's bookkeeping here
        self._cache[key] = pred
        return pred

    def timeline(self, mapping: Mapping[str, Mode]) -> Timeline:
        """The predicted execution with every task's start and end."""
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}
        ready: dict[str, float] = {}
        pred = self._run(dict(mapping), (starts, ends, ready))
        return Timeline(pred, starts, ends, ready)

    def _run(
        self, mapping: dict[str, Mode], record: tuple[dict, dict, dict] | None, unbounded: bool = False
    ) -> Prediction:
        self.evaluations += 1
        p = self.params
        budget = math.inf if unbounded else None  # unbounded: what the run would be were VRAM no limit
        disp = Dispatcher(self.workflow, mapping, p, cpu_slots=self.cpu_slots, vram_budget_mb=budget)  # type: ignore[arg-type]
        index = self._index
        fixed: list[tuple[float, int, str, int]] = []  # (end_ms, task order, task, phase 0 load / 1 cpu)
        gpu: dict[str, float] = {}  # GPU task in its run phase -> remaining isolated work (ms)
        now = 0.0
        peak = 0.0
        lost = 0.0  # sum over GPU tasks of (1 - rate) x time: the overlap's cost
        end_of: dict[str, float] = {}
        held_from: dict[str, float] = {}  # GPU task -> when it took its VRAM
        if record is not None:
            starts, ends, ready = record
            for t in self.ids:
                if not self.workflow.preds[t]:
                    ready[t] = 0.0
        while True:
            decision = disp.poll()
            if isinstance(decision, Infeasible):
                return self._infeasible(mapping, max(peak, decision.needed_mb), decision.task, record)
            for st in decision:
                t = st.task
                if record is not None:
                    starts[t] = now
                if st.mode is not Mode.CPU and st.vram_mb > 0:
                    held_from[t] = now
                if st.mode is Mode.CPU:
                    heapq.heappush(fixed, (now + p[t].cpu_ms, index[t], t, 1))
                elif st.load_ms > 0:
                    heapq.heappush(fixed, (now + st.load_ms, index[t], t, 0))
                else:
                    gpu[t] = p[t].gpu_ms  # type: ignore[assignment]
            if decision and disp.vram_in_use_mb > peak:
                peak = disp.vram_in_use_mb
            if not fixed and not gpu:
                break
            rates: Sequence[float] = ()
            names = list(gpu)
            if len(names) > 1:
                rates = gpu_rates([p[t].sensitivity for t in names], [p[t].pressure for t in names])
            dt = fixed[0][0] - now if fixed else math.inf
            for i, t in enumerate(names):
                r = rates[i] if rates else 1.0
                d = gpu[t] / r
                if d < dt:
                    dt = d
            if not math.isfinite(dt):
                raise PolicyError(f"predictor: time overflowed on {self.workflow.name}")
            now += dt
            if rates:
                lost += dt * sum(1.0 - r for r in rates)
            tol = _EPS * max(1.0, now)
            finished: list[str] = []
            for i, t in enumerate(names):
                rem = gpu[t] - dt * (rates[i] if rates else 1.0)
                if rem <= tol:
                    finished.append(t)
                else:
                    gpu[t] = rem
            for t in finished:
                del gpu[t]
            while fixed and fixed[0][0] - now <= tol:
                _, _, t, phase = heapq.heappop(fixed)
                if phase == 0:  # load done: the run starts now
                    gpu[t] = p[t].gpu_ms  # type: ignore[assignment]
                else:
                    finished.append(t)
            for t in sorted(finished, key=index.__getitem__):
                end_of[t] = now
                for nt in disp.finish(t):
                    if record is not None:
                        ready[nt] = now
            if record is not None:
                ends.update({t: end_of[t] for t in finished})
        e2e = max(end_of[t] for t in self.workflow.sinks)
        return self._ended(disp, e2e, peak, lost, held_from, end_of, record, unbounded)

    def _ended(
        self,
        disp: Dispatcher,
        e2e: float,
        peak: float,
        lost: float,
        held_from: Mapping[str, float],
        end_of: Mapping[str, float],
        record: tuple[dict, dict, dict] | None,
        unbounded: bool,
    ) -> Prediction:
        """The prediction of a run that ended: its VRAM holds when kept; unbounded, how far from fitting."""
        overlap = lost / e2e if e2e > 0 else 0.0
        holds = (
            {t: (a, end_of[t], self.params[t].vram_needed_mb) for t, a in held_from.items()}
            if unbounded or self.keep_holds
            else None
        )
        if unbounded:
            gpu_now = [t for t in held_from if disp.mapping[t] is Mode.GPU_NOW]
            budget = self.workflow.vram_budget_mb
            dist = feasibility_distance(self.workflow, budget, gpu_now, holds, self.vram_margin_mb)  # type: ignore[arg-type]
            return Prediction(None, peak, None, overlap, 0.0, e2e, dist, holds)
        slack = self._slack(disp, held_from, end_of) if record is None else math.inf  # a timeline needs none
        return Prediction(e2e, peak, None, overlap, slack, holds=holds)

    def _infeasible(
        self, mapping: dict[str, Mode], peak_mb: float, task: str, record: tuple[dict, dict, dict] | None
    ) -> Prediction:
        """A nominal run out of VRAM; in robust mode with what it would be were the starts to fit."""
        if not self.robust or record is not None:
            return Prediction(None, peak_mb, task)
        free = self._run(mapping, None, unbounded=True)
        return Prediction(
            None,
            peak_mb,
            task,
            free.overlap,
            math.inf,
            free.e2e_if_fits_ms,
            free.infeasible_by,
            free.holds if self.keep_holds else None,
        )

    def _slack(self, disp: Dispatcher, held_from: Mapping[str, float], end_of: Mapping[str, float]) -> float:
        """The mapping's timing slack (``vram.timing_slack``) when the predictor is robust, else inf."""
        gpu_now = [t for t in held_from if disp.mapping[t] is Mode.GPU_NOW]
        if not self.robust or not gpu_now:
            return math.inf
        holds = {t: (a, end_of[t], self.params[t].vram_needed_mb) for t, a in held_from.items()}
        return timing_slack(self.workflow, disp.budget_mb, gpu_now, holds, self.vram_margin_mb)


def _overlap_test(intervals: Sequence[tuple[float, float]]):
    """``overlaps(s, e)``: does some (a, b) of ``intervals`` meet s < b and a < e? Sorted starts and a
    running max of ends answer it by bisection: testing every pair was quadratic (most of a profiled
    round at 5,000 tasks)."""
    ivs = sorted(intervals)
    firsts = [a for a, _ in ivs]
    max_end = list(itertools.accumulate((b for _, b in ivs), max))

    def overlaps(s: float, e: float) -> bool:
        k = bisect.bisect_left(firsts, e)  # intervals [0, k) start before e
        return k > 0 and max_end[k - 1] > s

    return overlaps


def critical_focus(pred: Predictor):
    """Task indices worth moving first: the predicted critical path and the GPU tasks beside it."""
    ids = pred.ids
    wf = pred.workflow
    index = {t: i for i, t in enumerate(ids)}

    def focus(key: Key) -> list[int]:
        mapping = dict(zip(ids, key, strict=True))
        tl = pred.timeline(mapping)
        if not tl.prediction.feasible:  # out of memory: the GPU-resident tasks, largest first
            gpu = [t for t in ids if mapping[t] is not Mode.CPU]
            gpu.sort(key=lambda t: -pred.params[t].vram_needed_mb)
            return [index[t] for t in gpu[:50]]
        ends, starts, ready = tl.end_ms, tl.start_ms, tl.ready_ms
        t = max(wf.sinks, key=lambda s: ends.get(s, 0.0))
        path: list[str] = []
        eps = 1e-6 * max(1.0, ends[t])
        while t is not None and t not in path:
            path.append(t)
            s = starts[t]
            if s <= eps:
                break
            if s > ready.get(t, 0.0) + eps:  # waited for a resource (queue or CPU slot)
                t = next((u for u, e in ends.items() if abs(e - s) <= eps and u not in path), None)
            else:
                preds = wf.preds[t]
                t = max(preds, key=lambda u: ends.get(u, 0.0)) if preds else None
        crit = set(path)
        overlaps = _overlap_test([(starts[c], ends[c]) for c in path if mapping[c] is not Mode.CPU])
        beside = [u for u in ids if u not in crit and mapping[u] is not Mode.CPU and overlaps(starts[u], ends[u])]
        out = [index[u] for u in path] + [index[u] for u in beside[: 2 * len(path) + 10]]
        return out

    return focus
