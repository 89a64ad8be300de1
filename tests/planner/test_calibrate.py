"""Residual calibration: the correction follows the model's bias, the uncertainty widens with its errors."""

from __future__ import annotations

import math
import random

import pytest

from agentsched.planner.calibrate import PRIOR_SD, calibrate


def points(seed: int, n: int, err: float, bias: float = 0.0, slope: float = 0.0) -> list[tuple[float, float, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        c = rng.uniform(0.0, 0.6)
        out.append((c, bias + slope * c + rng.gauss(0.0, err), 5))
    return out


def test_no_residual_is_the_prior():
    cal = calibrate([])
    assert cal.sd == PRIOR_SD and cal.a == 0 and cal.b == 0
    assert cal.correct(1000.0, 0.3) == 1000.0


@pytest.mark.parametrize("seed", range(5))
def test_uncertainty_widens_with_the_error(seed):
    small = calibrate(points(seed, 12, 0.01))
    large = calibrate(points(seed, 12, 0.15))
    assert small.sd < PRIOR_SD < large.sd
    assert large.sd == pytest.approx(0.15, rel=0.5)


def test_measurement_noise_is_not_counted_as_model_error():
    pts = points(0, 12, 0.05)
    assert calibrate(pts, noise_sd=0.1).sd < calibrate(pts, noise_sd=0.0).sd


def test_correction_learns_bias_and_contention_slope():
    cal = calibrate(points(1, 30, 0.005, bias=0.05, slope=0.3))
    assert cal.a == pytest.approx(0.05, abs=0.03)
    assert cal.b == pytest.approx(0.3, abs=0.1)
    assert cal.correct(1000.0, 0.5) == pytest.approx(1000.0 * math.exp(0.05 + 0.15), rel=0.05)


def test_widen_multiplies_the_uncertainty():
    pts = points(2, 8, 0.02)
    assert calibrate(pts, widen=2.0).sd == pytest.approx(2 * calibrate(pts).sd)
