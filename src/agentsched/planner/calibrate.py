"""The model's own prediction errors, as a correction and an uncertainty on top of it.

The predictor replays the contention law the simulator was calibrated with; the machine may follow
another law (or drift). For every mapping measured in this epoch the residual is
``r = log(measured median E2E) - log(predicted E2E)``. A small ridge regression explains it by the
mapping's predicted *overlap* (the share of the E2E that GPU tasks spent slowed by each other,
``Prediction.overlap``): ``r ~ a + b * overlap``. A law that punishes contention more than the
model's shows up as b > 0, a global bias as a. An unmeasured mapping is then judged by
``predicted * exp(a + b * overlap)`` with the log uncertainty ``sd``: the spread of the residuals
around the regression (a prior pseudo-residual keeps it from claiming certainty on few points),
so it widens when the model errs and narrows when it predicts well.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agentsched.planner.evidence import Evidence, Key
from agentsched.planner.predict import Prediction

PRIOR_SD = 0.03  # log uncertainty of a prediction before any residual is seen
PRIOR_WEIGHT = 2.0  # pseudo-residuals of size PRIOR_SD behind every estimate of sd
RIDGE = (1 / 0.1**2, 1 / 0.5**2)  # prior precision of a and b (a bias of ~10%, slope of ~50%)
MAX_CALIBRATION_MAPPINGS = 12  # measured mappings whose residuals the calibration uses
MAX_WEIGHT = 5.0  # a mapping run more often than this counts no more (one mapping must not decide)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Correction ``exp(a + b * overlap)`` and log uncertainty ``sd`` of a prediction."""

    a: float = 0.0
    b: float = 0.0
    sd: float = PRIOR_SD
    points: int = 0

    def correct(self, predicted_ms: float, overlap: float) -> float:
        return predicted_ms * math.exp(self.a + self.b * overlap)

    def to_dict(self) -> dict[str, float]:
        return {"a": round(self.a, 4), "b": round(self.b, 4), "sd": round(self.sd, 4), "points": self.points}


def calibrate(points: Sequence[tuple[float, float, int]], noise_sd: float = 0.0, widen: float = 1.0) -> Calibration:
    """Fit from ``(overlap, residual, runs)`` per measured mapping. ``noise_sd``: log spread of one
    run (the part of a residual that is the measurement's, not the model's); ``widen`` multiplies
    the resulting sd (after a detected change)."""
    if not points:
        return Calibration(sd=PRIOR_SD * widen)
    x = np.array([[1.0, c] for c, _, _ in points])
    r = np.array([res for _, res, _ in points])
    w = np.array([min(float(n), MAX_WEIGHT) for _, _, n in points])
    h = x.T @ (w[:, None] * x) + np.diag(RIDGE)
    coef = np.linalg.solve(h, x.T @ (w * r))
    err = r - x @ coef
    # the measurement's own noise is not the model's error: remove its share from each residual
    meas = np.array([noise_sd**2 / max(n, 1) for _, _, n in points])
    model_var = np.maximum(err**2 - meas, 0.0)
    var = (PRIOR_WEIGHT * PRIOR_SD**2 + float(np.sum(model_var))) / (PRIOR_WEIGHT + len(points))
    return Calibration(float(coef[0]), float(coef[1]), math.sqrt(var) * widen, len(points))


def from_evidence(evidence: Evidence, predict: Callable[[Key], Prediction], widen: float = 1.0) -> Calibration:
    """The calibration from the residuals of the most recently measured mappings of this epoch (each costs
    a prediction: a large workflow's is not cheap)."""
    pts = []
    recent = sorted(evidence.measured_keys(), key=lambda k: -evidence.by_key[k].first_seen)
    for k in recent[:MAX_CALIBRATION_MAPPINGS]:
        p = predict(k)
        med = evidence.by_key[k].median_ms
        if p.e2e_ms is not None and p.e2e_ms > 0 and med:
            pts.append((p.overlap, math.log(med) - math.log(p.e2e_ms), evidence.by_key[k].runs))
    return calibrate(pts, evidence.run_sd(), widen)
