"""Contention learned online across invocations, for the load-aware planner (``load.py``).

Per unit tool u (``clip`` for ``clip_x12``): sensitivity s_u and pressure p_u of the project's
contention law (``model/contention.py``), started at the planner's tag prior
(``prior.contention_prior``), never the simulated world's. Every finished GPU run of a stream says
how long it ran (``run_ms``) and for how long each other unit ran beside it (``overlap_ms``); its
card gives its isolated time g. With the time-weighted foreign pressure ``P = sum_j overlap_j /
run_ms * p_j`` the law predicts ``run_ms / g = 1 + s_u * P``; one stochastic-gradient step on the
squared log error moves log s_u and every log p_j (a few thousand runs a second, no refit). Noise
of the isolated time averages out over runs.
"""

from __future__ import annotations

import math

from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.workflow import Mode
from agentsched.planner.prior import contention_prior

LEARNING_RATE = 0.5
MAX_STEP = 0.5  # largest change of a log parameter in one step (a straggler cannot throw it far)
LOG_BOUND = math.log(1e3)  # parameters stay in [1e-3, 1e3]


class ContentionLearner:
    """Online (s, p) per unit tool (module docstring)."""

    def __init__(self) -> None:
        self.log_s: dict[str, float] = {}
        self.log_p: dict[str, float] = {}
        self.runs = 0  # GPU runs learned from
        self.unit_runs: dict[str, int] = {}  # of those, the runs of each unit tool

    def _ensure(self, unit: str, tags: tuple[str, ...]) -> None:
        if unit not in self.log_s:
            s, p = contention_prior(tags)
            self.log_s[unit], self.log_p[unit] = math.log(s), math.log(p)

    def params(self, card: ToolCard) -> tuple[float, float]:
        """(s, p) of ``card``'s unit tool now."""
        unit = split_amplified(card.name)[0]
        self._ensure(unit, card.tags)
        return math.exp(self.log_s[unit]), math.exp(self.log_p[unit])

    def observe(self, card: ToolCard, mode: Mode, run_ms: float, overlap_ms: dict[str, float]) -> None:
        """Learn from one finished run (GPU runs beside others only)."""
        if mode is Mode.CPU or not overlap_ms or run_ms <= 0 or card.gpu_ms is None:
            return
        unit = split_amplified(card.name)[0]
        self._ensure(unit, card.tags)
        known = {u: d for u, d in overlap_ms.items() if u in self.log_p}  # units seen start at their prior
        if not known:
            return
        s = math.exp(self.log_s[unit])
        weights = {u: d / run_ms for u, d in known.items()}
        pressure = sum(w * math.exp(self.log_p[u]) for u, w in weights.items())
        predicted = 1.0 + s * pressure
        error = math.log(max(run_ms / card.gpu_ms, 1e-3)) - math.log(predicted)
        step = LEARNING_RATE * error
        share = s * pressure / predicted  # d log(predicted) / d log s
        self.log_s[unit] = _bounded(self.log_s[unit] + _clip(step * share))
        for u, w in weights.items():
            g = s * w * math.exp(self.log_p[u]) / predicted  # d log(predicted) / d log p_u
            self.log_p[u] = _bounded(self.log_p[u] + _clip(step * g))
        self.runs += 1
        self.unit_runs[unit] = self.unit_runs.get(unit, 0) + 1

    def learned(self) -> dict[str, tuple[float, float, int]]:
        """unit -> (s, p, runs) of every unit tool learned from at least one run (what a store keeps)."""
        return {u: (math.exp(self.log_s[u]), math.exp(self.log_p[u]), n) for u, n in self.unit_runs.items()}

    def restore(self, unit: str, s: float, p: float, runs: int) -> None:
        """Start ``unit`` from (s, p) learned over ``runs`` earlier runs (a store's, after a restart)
        instead of its prior; a value outside the learner's bounds raises ``ValueError``."""
        for name, v in (("s", s), ("p", p)):
            if not (
                isinstance(v, (int, float)) and math.isfinite(v) and v > 0 and abs(math.log(v)) <= LOG_BOUND + 1e-9
            ):
                raise ValueError(f"learned {name} of {unit} must be in [1e-3, 1e3], got {v!r}")
        if not (isinstance(runs, int) and runs >= 0):
            raise ValueError(f"runs learned for {unit} must be an integer >= 0, got {runs!r}")
        self.log_s[unit], self.log_p[unit] = _bounded(math.log(s)), _bounded(math.log(p))
        self.unit_runs[unit] = runs


def _clip(x: float) -> float:
    return max(-MAX_STEP, min(MAX_STEP, x))


def _bounded(x: float) -> float:
    return max(-LOG_BOUND, min(LOG_BOUND, x))


class MeasuredRatio:
    """What the planner measured over what it predicted, per unit tool: an exponential average of
    log(run_ms / predicted run_ms) over its ``gpu_now`` runs, and the factor that scales its next
    predicted GPU runs.

    Why, beside the learner above: the learner fits the linear law (``model/contention.py``); where
    the machine follows another (superlinear slowdown in the crowd, only the strongest co-runner
    counting), its predictions stay biased at the load the stream runs at, whatever (s, p) it
    learns, and a sensitive tool would go on being started on a GPU where its runs take several
    times the prediction (docs/results/load-tuning.md, "The measured ratio"). The prediction compared
    is the planner's own at the start (the running set then, the background pressure, future
    co-runners unknown), so the factor also absorbs what that prediction cannot see.
    """

    RATE = 0.05  # weight of a new run in the average (about the last 20 runs of the tool count)
    MAX_LOG = 3.0  # the factor stays within [1/20, 20]
    MAX_PENDING = 100_000  # predictions waiting for their run to end (a stream's worth; oldest dropped)

    def __init__(self) -> None:
        self.log_ratio: dict[str, float] = {}
        self._pending: dict[tuple[int, str], tuple[str, float]] = {}  # (invocation, task) -> (unit, predicted)

    def factor(self, card: ToolCard) -> float:
        """Scale of ``card``'s next predicted GPU run (1 until one of its runs was measured)."""
        x = self.log_ratio.get(split_amplified(card.name)[0], 0.0)
        return math.exp(max(-self.MAX_LOG, min(self.MAX_LOG, x)))

    def started(self, invocation: int, task: str, card: ToolCard, predicted_ms: float) -> None:
        """A ``gpu_now`` run starts, predicted ``predicted_ms`` before the factor."""
        if predicted_ms > 0 and invocation >= 0:
            if len(self._pending) >= self.MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            self._pending[(invocation, task)] = (split_amplified(card.name)[0], predicted_ms)

    def restore(self, unit: str, log_ratio: float) -> None:
        """Resume ``unit``'s average (a restarted server, ``service/contention_memory.py``); a value
        that is not a finite number is a ``ValueError`` (a damaged store: the caller skips it)."""
        if isinstance(log_ratio, bool) or not isinstance(log_ratio, (int, float)) or not math.isfinite(log_ratio):
            raise ValueError(f"measured ratio of {unit} must be a finite number, got {log_ratio!r}")
        self.log_ratio[unit] = max(-self.MAX_LOG, min(self.MAX_LOG, float(log_ratio)))

    def forget(self, invocation: int) -> None:
        """``invocation`` ended early: its runs that never ended are not waited for."""
        for key in [k for k in self._pending if k[0] == invocation]:
            del self._pending[key]

    def observe(self, invocation: int, task: str, mode: Mode, run_ms: float) -> None:
        """A run ended: move its tool's average toward what it measured."""
        pending = self._pending.pop((invocation, task), None)
        if pending is None or mode is not Mode.GPU_NOW or run_ms <= 0:
            return
        unit, predicted_ms = pending
        old = self.log_ratio.get(unit, 0.0)
        self.log_ratio[unit] = old + self.RATE * (math.log(run_ms / predicted_ms) - old)
