"""Online per-size learning: a tool's cost curve on one device, learned from measured (size, ms) executions.

``SizeModel`` is what a policy, the planner or the monitor asks "how long on inputs of size n?". It keeps a
window of measurements and, from ``min_samples`` (5) of them, fits the candidate shapes (a constant,
fixed + per-unit slope, a*n**b + c, and the card's curve times a learned factor when a card is given) and
keeps the one with the lowest AICc on log residuals: few measurements choose few parameters. Its answer
carries an uncertainty (the log-residual spread, widened away from the sizes seen as a regression's
prediction interval is), so a caller can weigh it as evidence. Before ``min_samples`` it answers only with
a card (the card's curve times what the measurements so far say of this machine), or not at all.

``StarpuHistory`` and ``StarpuRegression`` are StarPU's own performance models, the baselines: a mean per
size bucket, usable once a bucket holds ``STARPU_CALIBRATION_MINIMUM`` (10) measurements; and a*n**b + c
fitted once 10 measurements are in, trusted only inside the sizes seen (outside it refuses: None).

``residual``/``zscore`` compare a measurement with the curve's prediction at its own size: what a monitor
averages and a change detector watches, so a shift in the traffic's sizes is not read as a change of the
machine.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from agentsched.model.cards import ToolCard
from agentsched.model.curve_fit import FitError, clean_points, fit_constant, fit_linear, fit_power
from agentsched.model.curves import MAX_SIZE, MAX_VALUE, Curve, PowerCurve

MIN_SAMPLES = 5  # measurements before a curve is fitted
STARPU_CALIBRATION_MINIMUM = 10  # StarPU's STARPU_CALIBRATE_MINIMUM default
WINDOW = 256  # measurements kept per model (the most recent)
_MIN_SD = 0.01  # a log-residual spread below 1% is read as 1% (a perfect fit of few points is luck)
_JACK_GROUPS = 10  # delete-a-group jackknife: refits per fit, bounding the cost of an uncertainty
_PRIOR_SD = 0.5  # relative spread of a card's curve taken alone (a card of another machine may be off 2x)


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted time at one size, with its uncertainty."""

    ms: float  # the predicted time (median)
    rel_sd: float  # standard deviation of log(measured / predicted): ~ the relative error to expect
    inside: bool  # the size lies within the sizes measured (False: an extrapolation, or none measured)
    source: str  # "fit" (learned), "card" (the card's curve, scaled by the measurements so far)
    samples: int  # measurements behind it

    @property
    def low_ms(self) -> float:
        """The lower end of a ~95% interval."""
        return self.ms * math.exp(-2.0 * self.rel_sd)

    @property
    def high_ms(self) -> float:
        """The upper end of a ~95% interval."""
        return self.ms * math.exp(2.0 * self.rel_sd)


def _valid(size: float, ms: float) -> bool:
    return (
        isinstance(size, (int, float))
        and isinstance(ms, (int, float))
        and math.isfinite(size)
        and math.isfinite(ms)
        and 0 <= size <= MAX_SIZE
        and 0 < ms <= MAX_VALUE
    )


def _aicc(log_res: np.ndarray, k: int) -> float:
    n = len(log_res)
    if n <= k + 1:
        return math.inf
    sse = max(float(np.sum(log_res**2)), n * 1e-12)
    return n * math.log(sse / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


# Student's t 97.5% quantiles by degrees of freedom (the normal's 1.96 beyond 30)
_T975 = {
    1: 12.71,
    2: 4.30,
    3: 3.18,
    4: 2.78,
    5: 2.57,
    6: 2.45,
    7: 2.36,
    8: 2.31,
    9: 2.26,
    10: 2.23,
    12: 2.18,
    15: 2.13,
    20: 2.09,
    30: 2.04,
}


def _t_widening(dof: int) -> float:
    """t(0.975, dof) / 1.96: how much wider a 95% interval is when its spread was estimated from few points."""
    if dof > 30:
        return 1.0
    key = max((d for d in _T975 if d <= max(dof, 1)), default=1)
    return _T975[key] / 1.96


class _ScaledCurve:
    """A card's curve times a factor (the machine is faster or slower than the card's)."""

    def __init__(self, curve: Curve, factor: float) -> None:
        self.curve, self.factor = curve, factor

    def at(self, n: float) -> float:
        return min(self.curve.at(n) * self.factor, MAX_VALUE)


class SizeModel:
    """One tool on one device: time as a learned function of the input size."""

    def __init__(self, prior: Curve | None = None, *, min_samples: int = MIN_SAMPLES, window: int = WINDOW) -> None:
        if min_samples < 1 or window < min_samples:
            raise ValueError(f"need 1 <= min_samples <= window, got {min_samples} and {window}")
        self.prior = prior  # the card's curve (None: cold start)
        self.min_samples = min_samples
        self._obs: deque[tuple[float, float]] = deque(maxlen=window)  # (size, ms), the most recent
        self._fit: tuple[Curve | _ScaledCurve, float, str, int] | None = None  # curve, log sd, kind, params
        self._jack: list[Curve | _ScaledCurve] = []  # the chosen shape refitted on subsets (its uncertainty)
        self._stale = True
        self.rejected = 0  # measurements refused (not finite, size < 0, ms <= 0)

    # ---- learning ---------------------------------------------------------------------------------
    def observe(self, size: float, ms: float) -> bool:
        """One measured execution; False (and counted in ``rejected``) when it is not a usable pair."""
        if not _valid(size, ms):
            self.rejected += 1
            return False
        self._obs.append((float(size), float(ms)))
        self._stale = True
        return True

    @property
    def samples(self) -> int:
        return len(self._obs)

    @property
    def usable(self) -> bool:
        """Does it predict from measurements (``min_samples`` of them)?"""
        return self.samples >= self.min_samples

    def size_range(self) -> tuple[float, float] | None:
        """Smallest and largest size measured (None before any)."""
        if not self._obs:
            return None
        sizes = [s for s, _ in self._obs]
        return min(sizes), max(sizes)

    def _candidates(self, n: np.ndarray, y: np.ndarray) -> list[tuple[str, Curve | _ScaledCurve, int]]:
        out: list[tuple[str, Curve | _ScaledCurve, int]] = [("constant", fit_constant(n, y), 1)]
        if len(np.unique(n)) >= 2:
            out.append(("linear", fit_linear(n, y), 2))
            out.append(("power", fit_power(n, y), 3))
        if self.prior is not None:
            out.append(("card", _ScaledCurve(self.prior, self._prior_factor(n, y)), 1))
        return out

    def _prior_factor(self, n: np.ndarray, y: np.ndarray) -> float:
        """The geometric mean of measured / card: how much faster or slower this machine is (1 with none)."""
        if self.prior is None or len(n) == 0:
            return 1.0
        ratios = [math.log(v / p) for s, v in zip(n, y, strict=True) if (p := self.prior.at(float(s))) > 0]
        return math.exp(sum(ratios) / len(ratios)) if ratios else 1.0

    def _refit(self) -> None:
        self._stale = False
        self._fit, self._jack = None, []
        if not self.usable:
            return
        n, y = clean_points([s for s, _ in self._obs], [v for _, v in self._obs])
        best: tuple[float, Curve | _ScaledCurve, float, str, int] | None = None
        try:
            cands = self._candidates(n, y)
        except FitError:
            return
        for kind, curve, k in cands:
            res = np.log(y / np.maximum([curve.at(float(s)) for s in n], 1e-300))
            score = _aicc(res, k)
            if best is None or score < best[0]:
                sd = math.sqrt(float(np.sum(res**2)) / max(len(res) - k, 1))
                best = (score, curve, max(sd, _MIN_SD), kind, k)
        if best is not None:
            self._fit = (best[1], best[2], best[3], best[4])
            self._jack = self._jackknife(best[3], n, y)

    def _fit_kind(self, kind: str, n: np.ndarray, y: np.ndarray) -> Curve | _ScaledCurve:
        if kind == "card" and self.prior is not None:
            return _ScaledCurve(self.prior, self._prior_factor(n, y))
        return {"constant": fit_constant, "linear": fit_linear}.get(kind, fit_power)(n, y)

    def _jackknife(self, kind: str, n: np.ndarray, y: np.ndarray) -> list[Curve | _ScaledCurve]:
        """The chosen shape refitted without each of up to ``_JACK_GROUPS`` groups of measurements: how far
        its predictions move says how well the data pin its parameters (the exponent above all), which a
        residual spread alone does not (a curve can fit the sizes seen and still extrapolate badly)."""
        groups = min(len(n), _JACK_GROUPS)
        out = []
        for g in range(groups):
            keep = np.arange(len(n)) % groups != g
            try:
                out.append(self._fit_kind(kind, n[keep], y[keep]))
            except FitError:
                continue
        return out

    @property
    def kind(self) -> str | None:
        """The shape chosen: constant, linear, power or card (None before ``min_samples``)."""
        if self._stale:
            self._refit()
        return None if self._fit is None else self._fit[2]

    def curve(self) -> Curve | None:
        """The learned curve as a card curve (None before ``min_samples``)."""
        if self._stale:
            self._refit()
        if self._fit is None:
            return None
        c = self._fit[0]
        return c.curve.scaled(c.factor) if isinstance(c, _ScaledCurve) else c

    # ---- predicting -------------------------------------------------------------------------------
    def _spread_at(self, size: float, sd: float, k: int, predicted: float) -> float:
        """The spread of one measurement around the prediction: the residual spread (a call's own noise) and
        the jackknife variance of the prediction at ``size`` (the curve's, large far from the sizes seen),
        widened by Student's t for the few measurements behind both (so +-2 spreads hold ~95% of them)."""
        logs = [math.log(max(c.at(size), 1e-300) / predicted) for c in self._jack]
        g = len(logs)
        var = (g - 1) / g * sum((v - sum(logs) / g) ** 2 for v in logs) if g > 1 else sd * sd
        return math.sqrt(sd * sd + var) * _t_widening(self.samples - k)

    def predict(self, size: float) -> Prediction | None:
        """Time at ``size``: the learned curve; before ``min_samples``, the card's curve scaled by the
        measurements so far; None without either (cold start, too few measurements) or for a bad size."""
        if not (isinstance(size, (int, float)) and math.isfinite(size) and 0 <= size <= MAX_SIZE):
            return None
        if self._stale:
            self._refit()
        rng = self.size_range()
        inside = rng is not None and rng[0] <= size <= rng[1]
        if self._fit is not None:
            curve, sd, _, k = self._fit
            ms = max(curve.at(size), 1e-6)
            return Prediction(
                ms=ms,
                rel_sd=self._spread_at(size, sd, k, ms),
                inside=inside,
                source="fit",
                samples=self.samples,
            )
        if self.prior is None:
            return None
        n, y = clean_points([s for s, _ in self._obs], [v for _, v in self._obs])
        factor = self._prior_factor(n, y)
        return Prediction(
            ms=max(self.prior.at(size) * factor, 1e-6),
            rel_sd=_PRIOR_SD / math.sqrt(1 + len(n)),
            inside=inside,
            source="card",
            samples=self.samples,
        )

    def residual(self, size: float, ms: float) -> float | None:
        """log(measured / predicted at its own size); None when there is no prediction or the pair is bad."""
        p = self.predict(size) if _valid(size, ms) else None
        return None if p is None else math.log(ms / p.ms)

    def zscore(self, size: float, ms: float) -> float | None:
        """The residual in units of the prediction's spread: what a change detector (Page-Hinkley) reads."""
        p = self.predict(size) if _valid(size, ms) else None
        return None if p is None else math.log(ms / p.ms) / p.rel_sd


class SizeModels:
    """One ``SizeModel`` per (task, device) of a workflow, each with its card's curve for that device as the
    prior (a card without curves, or cold start: none). What a monitor feeds with every sized span
    (``observe(task, on_gpu, span.size, span.run_ms)``) and asks for residuals at a span's own size."""

    def __init__(self, cards: Mapping[str, ToolCard] | None = None) -> None:
        self.cards = dict(cards) if cards is not None else None  # task -> card; None: cold start
        self._models: dict[tuple[str, bool], SizeModel] = {}

    def model(self, task: str, on_gpu: bool) -> SizeModel:
        """The task's model on the GPU (``on_gpu``; a host-only tool's GPU placement runs on the CPU) or the CPU."""
        card = self.cards.get(task) if self.cards is not None else None
        on_gpu = on_gpu and (card is None or card.has_gpu)
        got = self._models.get((task, on_gpu))
        if got is None:
            curves = card.curves if card is not None else None
            prior = None if curves is None else curves.gpu_ms if on_gpu else curves.cpu_ms
            got = self._models[(task, on_gpu)] = SizeModel(prior=prior)
        return got

    def observe(self, task: str, on_gpu: bool, size: float | None, ms: float | None) -> bool:
        """One span: False (nothing learned) when its size or time is unknown or unusable."""
        if size is None or ms is None:
            return False
        return self.model(task, on_gpu).observe(size, ms)

    def residual(self, task: str, on_gpu: bool, size: float | None, ms: float | None) -> float | None:
        """log(measured / predicted at the span's own size); None without a size or a prediction."""
        if size is None or ms is None:
            return None
        return self.model(task, on_gpu).residual(size, ms)


def size_residuals(model: SizeModel, pairs: list[tuple[float, float]]) -> list[float]:
    """The residuals of many (size, ms) measurements against the model (bad pairs dropped): compare these,
    not raw means, before and after a suspected change."""
    out = []
    for size, ms in pairs:
        r = model.residual(size, ms)
        if r is not None:
            out.append(r)
    return out


# ---- StarPU's models: the baselines -----------------------------------------------------------------------
class StarpuHistory:
    """StarPU's history-based model: the mean time per size bucket (a power-of-two range of sizes, StarPU's
    footprint made coarse enough to repeat), usable once that bucket holds ``min_samples`` measurements."""

    def __init__(self, *, min_samples: int = STARPU_CALIBRATION_MINIMUM) -> None:
        self.min_samples = min_samples
        self._buckets: dict[int, list[float]] = {}  # bucket -> [count, mean]

    @staticmethod
    def bucket(size: float) -> int:
        return -1 if size < 1 else int(math.floor(math.log2(size)))

    def observe(self, size: float, ms: float) -> bool:
        if not _valid(size, ms):
            return False
        b = self._buckets.setdefault(self.bucket(size), [0.0, 0.0])
        b[0] += 1
        b[1] += (ms - b[1]) / b[0]
        return True

    def predict(self, size: float) -> float | None:
        if not (isinstance(size, (int, float)) and math.isfinite(size) and size >= 0):
            return None
        b = self._buckets.get(self.bucket(size))
        return b[1] if b is not None and b[0] >= self.min_samples else None


class StarpuRegression:
    """StarPU's non-linear regression model a*n**b + c: fitted once ``min_samples`` measurements are in, and
    trusted only inside the sizes seen ([smallest, largest] measured); elsewhere it refuses (None)."""

    def __init__(self, *, min_samples: int = STARPU_CALIBRATION_MINIMUM) -> None:
        self.min_samples = min_samples
        self._obs: list[tuple[float, float]] = []
        self._curve: PowerCurve | None = None

    def observe(self, size: float, ms: float) -> bool:
        if not _valid(size, ms):
            return False
        self._obs.append((float(size), float(ms)))
        self._curve = None
        return True

    @property
    def usable(self) -> bool:
        return len(self._obs) >= self.min_samples

    def predict(self, size: float) -> float | None:
        if not self.usable or not (isinstance(size, (int, float)) and math.isfinite(size)):
            return None
        sizes = [s for s, _ in self._obs]
        if not (min(sizes) <= size <= max(sizes)):
            return None
        if self._curve is None:
            self._curve = fit_power(sizes, [v for _, v in self._obs])
        return max(self._curve.at(size), 1e-6)


__all__ = [
    "MIN_SAMPLES",
    "STARPU_CALIBRATION_MINIMUM",
    "Prediction",
    "SizeModel",
    "StarpuHistory",
    "StarpuRegression",
    "size_residuals",
]
