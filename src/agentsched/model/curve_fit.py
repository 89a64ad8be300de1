"""Fitting cost curves to measured (size, value) pairs: one routine for the profiler and the online learner.

Every fit minimises the squared *relative* error (a 5 ms call off by 1 ms is as wrong as a 500 ms call off
by 100 ms): weighted least squares with weights 1/value**2. ``a*n**b+c`` is fitted by a search over the
exponent b (a grid, then a finer one around the best), each b solved in closed form for (a, c) >= 0.
``fit_report`` adds the fit's error on the points and its leave-one-out error (each point predicted by a
fit to the others: the error on a size the fit has not seen).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentsched.model.curves import (
    MAX_EXPONENT,
    MAX_VALUE,
    ConstantCurve,
    Curve,
    LinearCurve,
    PointsCurve,
    PowerCurve,
)

KINDS = ("constant", "linear", "power", "points")
_MIN_B = 0.05  # exponents searched: [_MIN_B, MAX_EXPONENT]
_HUBER_K = 1.345  # Huber's constant: 95% efficiency on normal residuals
_MIN_ROBUST_SCALE = 0.05  # residuals within 5% are never down-weighted (a near-perfect fit of few points)


class FitError(ValueError):
    """Too few or unusable points for the curve asked for (one line)."""


def clean_points(sizes: Sequence[float], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The finite pairs with size >= 0 and value > 0, as float arrays (anything else is dropped)."""
    if len(sizes) != len(values):
        raise FitError(f"{len(sizes)} sizes but {len(values)} values")
    n = np.asarray(sizes, dtype=float).reshape(-1)
    y = np.asarray(values, dtype=float).reshape(-1)
    keep = np.isfinite(n) & np.isfinite(y) & (n >= 0) & (y > 0) & (y <= MAX_VALUE)
    return n[keep], y[keep]


def _solve_ac(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row of ``x`` (one candidate exponent per row): the (a, c) >= 0 minimising
    sum w*(a*x + c - y)**2, and that weighted squared error. Vectorised over the rows."""
    sw, swx, swy = w.sum(), (w * x).sum(1), (w * y).sum()
    swxx, swxy = (w * x * x).sum(1), (w * x * y).sum(1)
    det = sw * swxx - swx * swx
    safe = np.where(np.abs(det) > 1e-300, det, 1.0)
    a = np.where(np.abs(det) > 1e-300, (sw * swxy - swx * swy) / safe, 0.0)
    c = np.where(np.abs(det) > 1e-300, (swxx * swy - swx * swxy) / safe, swy / sw)
    # a boundary is the answer when the free optimum leaves the quadrant: c = 0 (a alone) or a = 0 (c alone)
    a_only = np.where(swxx > 0, swxy / np.where(swxx > 0, swxx, 1.0), 0.0)
    c_only = np.full_like(a, swy / sw)
    bad = (a < 0) | (c < 0)
    cand = [(np.where(bad, np.maximum(a_only, 0.0), a), np.where(bad, 0.0, c)), (np.zeros_like(a), c_only)]
    best_a, best_c, best_e = None, None, None
    for ca, cc in cand:
        err = (w * (ca[:, None] * x + cc[:, None] - y) ** 2).sum(1)
        if best_e is None:
            best_a, best_c, best_e = ca, cc, err
        else:
            better = err < best_e
            best_a, best_c, best_e = (
                np.where(better, ca, best_a),
                np.where(better, cc, best_c),
                np.where(better, err, best_e),
            )
    return best_a, best_c, best_e


def _power_at(n: np.ndarray, bs: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", divide="ignore"):
        return np.where(n[None, :] > 0, np.power(np.maximum(n[None, :], 1e-300), bs[:, None]), 0.0)


def _fit_power_weighted(n: np.ndarray, y: np.ndarray, w: np.ndarray, b: float | None) -> PowerCurve:
    if b is not None:
        bs = np.array([min(max(float(b), _MIN_B), MAX_EXPONENT)])
    else:
        coarse = np.linspace(_MIN_B, MAX_EXPONENT, 80)
        a, c, e = _solve_ac(_power_at(n, coarse), y, w)
        i = int(np.argmin(e))
        step = coarse[1] - coarse[0]
        bs = np.linspace(max(_MIN_B, coarse[i] - step), min(MAX_EXPONENT, coarse[i] + step), 41)
    a, c, e = _solve_ac(_power_at(n, bs), y, w)
    i = int(np.argmin(e))
    return PowerCurve(a=float(np.clip(a[i], 0.0, MAX_VALUE)), b=float(bs[i]), c=float(np.clip(c[i], 0.0, MAX_VALUE)))


def huber_weights(log_res: np.ndarray) -> np.ndarray:
    """Huber's weights for log residuals (1 near the fit, k*s/|r| beyond k*s; s a MAD scale, at least 5%):
    why: a shared machine's measurements carry one-sided spikes (a call preempted for twice its time), and
    a squared-error fit follows one such spike among a few points far more than the others."""
    med = float(np.median(log_res))
    scale = max(1.4826 * float(np.median(np.abs(log_res - med))), _MIN_ROBUST_SCALE)
    k = _HUBER_K * scale
    r = np.abs(log_res)
    return np.where(r <= k, 1.0, k / np.maximum(r, 1e-300))


def fit_power(
    sizes: Sequence[float], values: Sequence[float], *, b: float | None = None, robust: bool = True
) -> PowerCurve:
    """The a*n**b+c (a, c >= 0) closest to the points in relative error; ``b`` fixes the exponent. ``robust``
    (from 4 points): refitted twice with Huber's weights, so a few spiked measurements pull it less."""
    n, y = clean_points(sizes, values)
    if len(n) < 1:
        raise FitError("no usable (size, value) point to fit")
    w = 1.0 / (y * y)
    if b is None and len(np.unique(n)) < 2:  # one size says nothing of the slope: a constant
        return PowerCurve(a=0.0, b=1.0, c=float(np.clip(np.sum(w * y) / np.sum(w), 0.0, MAX_VALUE)))
    curve = _fit_power_weighted(n, y, w, b)
    if robust and len(n) >= 4:
        for _ in range(2):
            pred = np.maximum([curve.at(float(x)) for x in n], 1e-300)
            curve = _fit_power_weighted(n, y, w * huber_weights(np.log(y / pred)), b)
    return curve


def fit_linear(sizes: Sequence[float], values: Sequence[float]) -> LinearCurve:
    """fixed + per_unit * n (both >= 0), closest in relative error."""
    p = fit_power(sizes, values, b=1.0)
    return LinearCurve(fixed=p.c, per_unit=p.a)


def fit_constant(sizes: Sequence[float], values: Sequence[float]) -> ConstantCurve:
    """The constant closest in relative error."""
    _, y = clean_points(sizes, values)
    if len(y) < 1:
        raise FitError("no usable (size, value) point to fit")
    w = 1.0 / (y * y)
    return ConstantCurve(value=float(np.clip(np.sum(w * y) / np.sum(w), 0.0, MAX_VALUE)))


def fit_points(sizes: Sequence[float], values: Sequence[float]) -> PointsCurve:
    """The median value at each distinct size > 0, as a points curve (needs two sizes)."""
    n, y = clean_points(sizes, values)
    keep = n > 0
    n, y = n[keep], y[keep]
    distinct = np.unique(n)
    if len(distinct) < 2:
        raise FitError("a points curve needs values at two sizes above 0 at least")
    return PointsCurve(points=tuple((float(s), float(np.median(y[n == s]))) for s in distinct))


def fit_curve(kind: str, sizes: Sequence[float], values: Sequence[float]) -> Curve:
    """A curve of ``kind`` (constant, linear, power, points) fitted to the points."""
    fits = {"constant": fit_constant, "linear": fit_linear, "power": fit_power, "points": fit_points}
    if kind not in fits:
        raise FitError(f"unknown curve kind {kind!r} (valid: {', '.join(KINDS)})")
    return fits[kind](sizes, values)


def relative_errors(curve: Curve, sizes: Sequence[float], values: Sequence[float]) -> list[float]:
    """|curve(n) - v| / v for each usable point."""
    n, y = clean_points(sizes, values)
    return [abs(curve.at(float(s)) - float(v)) / float(v) for s, v in zip(n, y, strict=True)]


@dataclass(frozen=True)
class FitReport:
    """A fitted curve and how well it fits: on its own points, and on points left out one at a time."""

    curve: Curve
    points: int  # usable points fitted
    size_span: float  # largest / smallest size above 0 (the profiler aims for >= 10)
    median_error: float  # median relative error on the fitted points
    max_error: float  # worst relative error on the fitted points
    loo_median_error: float | None  # leave-one-out median relative error; None below 4 points

    def to_dict(self) -> dict[str, object]:
        return {
            "curve": self.curve.model_dump(mode="json"),
            "points": self.points,
            "size_span": round(self.size_span, 3),
            "median_error": round(self.median_error, 4),
            "max_error": round(self.max_error, 4),
            "loo_median_error": None if self.loo_median_error is None else round(self.loo_median_error, 4),
        }


def fit_report(kind: str, sizes: Sequence[float], values: Sequence[float]) -> FitReport:
    """Fit ``kind`` and measure its error (leave-one-out over distinct sizes: all points of one size out)."""
    n, y = clean_points(sizes, values)
    curve = fit_curve(kind, n.tolist(), y.tolist())
    errs = relative_errors(curve, n.tolist(), y.tolist())
    pos = n[n > 0]
    span = float(pos.max() / pos.min()) if len(pos) else 1.0
    distinct = np.unique(n)
    loo: float | None = None
    if len(distinct) >= 4:
        held = []
        for s in distinct:
            rest = n != s
            try:
                c = fit_curve(kind, n[rest].tolist(), y[rest].tolist())
            except FitError:
                continue
            held += relative_errors(c, n[~rest].tolist(), y[~rest].tolist())
        loo = float(np.median(held)) if held else None
    return FitReport(
        curve=curve,
        points=len(n),
        size_span=span,
        median_error=float(np.median(errs)),
        max_error=float(max(errs)),
        loo_median_error=loo,
    )


def log_residual(predicted: float, measured: float) -> float | None:
    """log(measured / predicted): the relative residual of one measurement (None when either is not > 0)."""
    if not (predicted > 0 and measured > 0 and math.isfinite(predicted) and math.isfinite(measured)):
        return None
    return math.log(measured / predicted)
