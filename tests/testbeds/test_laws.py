"""The contention laws as pure functions: one test per invalid argument, the reductions every law
must satisfy (alone: rate 1; monotone in foreign pressure), and hand-computed values."""

from __future__ import annotations

import math
import random

import pytest

from agentsched.errors import WorldError
from agentsched.model.contention import gpu_rates
from agentsched.testbeds.laws import (
    LinearLaw,
    MaxLaw,
    PowerLaw,
    SaturatingLaw,
    ThresholdLaw,
    linear_rates,
    max_rates,
    power_rates,
    rate_function,
    saturating_rates,
    threshold_rates,
)

# every law as (name, checked function with its parameters, validated law for the simulator)
LAWS = [
    ("linear", linear_rates, LinearLaw()),
    ("max", max_rates, MaxLaw()),
    ("power", lambda s, p: power_rates(s, p, 1.5), PowerLaw(gamma=1.5)),
    ("threshold", lambda s, p: threshold_rates(s, p, 0.5), ThresholdLaw(threshold=0.5)),
    ("saturating", lambda s, p: saturating_rates(s, p, 1.0), SaturatingLaw(scale=1.0)),
]
IDS = [name for name, _, _ in LAWS]


# -- invalid arguments: one test each -------------------------------------------------------------


@pytest.mark.parametrize("name, law, _", LAWS, ids=IDS)
def test_sensitivity_and_pressure_of_different_lengths(name, law, _):
    with pytest.raises(WorldError, match=r"^sensitivity and pressure differ in length \(2 vs 1\)$"):
        law([0.1, 0.2], [0.3])


@pytest.mark.parametrize("name, law, _", LAWS, ids=IDS)
@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "1"])
def test_a_negative_or_non_finite_sensitivity(name, law, _, bad):
    with pytest.raises(WorldError, match="^sensitivity must be finite and >= 0, got "):
        law([0.1, bad], [0.3, 0.4])


@pytest.mark.parametrize("name, law, _", LAWS, ids=IDS)
@pytest.mark.parametrize("bad", [-1.0, math.nan, -math.inf, None])
def test_a_negative_or_non_finite_pressure(name, law, _, bad):
    with pytest.raises(WorldError, match="^pressure must be finite and >= 0, got "):
        law([0.1, 0.2], [bad, 0.4])


@pytest.mark.parametrize("gamma", [0.0, -1.0, 4.01, math.nan, math.inf])
def test_power_gamma_outside_0_4(gamma):
    with pytest.raises(WorldError, match=r"^gamma must be in \(0, 4\], got "):
        power_rates([0.1, 0.2], [0.3, 0.4], gamma)


@pytest.mark.parametrize("threshold", [-0.01, 1000.5, math.nan])
def test_threshold_outside_0_1000(threshold):
    with pytest.raises(WorldError, match=r"^threshold must be in \[0, 1000\], got "):
        threshold_rates([0.1, 0.2], [0.3, 0.4], threshold)


@pytest.mark.parametrize("scale", [0.0, -2.0, 1001.0, math.inf])
def test_saturating_scale_outside_0_1000(scale):
    with pytest.raises(WorldError, match=r"^scale must be in \(0, 1000\], got "):
        saturating_rates([0.1, 0.2], [0.3, 0.4], scale)


# -- what every law satisfies ---------------------------------------------------------------------


@pytest.mark.parametrize("name, law, _", LAWS, ids=IDS)
def test_without_co_runners_every_rate_is_1(name, law, _):
    assert law([], []) == []
    assert law([5.0], [3.0]) == [1.0]
    # co-runners that press nothing slow nobody, however sensitive
    assert law([5.0, 2.0, 0.0], [3.0, 0.0, 0.0]) == [1.0, pytest.approx(1 / (1 + 2.0 * _own_law_of(name, 3.0))), 1.0]


def _own_law_of(name: str, foreign: float) -> float:
    """The slowdown term per unit sensitivity of one law at a single foreign pressure."""
    return {
        "linear": foreign,
        "max": foreign,
        "power": foreign**1.5,
        "threshold": max(0.0, foreign - 0.5),
        "saturating": 1.0 - math.exp(-foreign),
    }[name]


@pytest.mark.parametrize("name, law, _", LAWS, ids=IDS)
def test_rates_are_in_0_1_and_monotone_in_foreign_pressure(name, law, _):
    rng = random.Random(f"monotone:{name}")
    for _trial in range(200):
        n = rng.randint(2, 6)
        s = [rng.choice([0.0, rng.uniform(0, 6)]) for _ in range(n)]
        p = [rng.choice([0.0, rng.uniform(0, 4)]) for _ in range(n)]
        before = law(s, p)
        assert all(0 < r <= 1 for r in before)
        j = rng.randrange(n)
        more = list(p)
        more[j] += rng.uniform(0, 2)  # one task presses harder: nobody else gets faster
        after = law(s, more)
        assert all(after[i] <= before[i] + 1e-15 for i in range(n) if i != j)
        assert after[j] == pytest.approx(before[j], rel=1e-12)  # its own pressure never slows itself


@pytest.mark.parametrize("name, law, model", LAWS, ids=IDS)
def test_the_simulators_kernel_is_the_checked_function(name, law, model):
    s, p = [0.3, 1.2, 0.0, 2.0], [2.9, 0.2, 3.4, 0.5]
    assert rate_function(model)(s, p) == law(s, p)


# -- hand-computed values and reductions to the linear law ------------------------------------------


def test_linear_is_the_predictors_law():
    s, p = [0.336, 0.743, 0.106], [2.929, 3.399, 0.482]
    assert linear_rates(s, p) == gpu_rates(s, p)
    assert rate_function(LinearLaw()) is gpu_rates  # the default world's arithmetic, bit for bit


def test_max_counts_only_the_strongest_co_runner():
    assert max_rates([1.0, 1.0, 1.0], [3.0, 1.0, 2.0]) == [1 / 3, 1 / 4, 1 / 4]
    assert max_rates([1.0, 1.0], [2.0, 2.0]) == [1 / 3, 1 / 3]  # a tie: the other one counts
    s, p = [0.3, 0.8], [1.7, 0.4]
    assert max_rates(s, p) == linear_rates(s, p)  # two tasks: max and sum agree


def test_power_is_superlinear_and_linear_at_gamma_1():
    assert power_rates([1.0, 1.0, 1.0], [1.0, 1.0, 2.0], 2.0) == [1 / 10, 1 / 10, 1 / 5]
    s, p = [0.3, 0.8, 2.0], [1.7, 0.4, 0.9]
    assert power_rates(s, p, 1.0) == pytest.approx(linear_rates(s, p), rel=1e-15)


def test_threshold_absorbs_pressure_below_it():
    assert threshold_rates([2.0, 2.0], [0.3, 1.5], 0.5) == [1 / 3, 1.0]
    s, p = [0.3, 0.8, 2.0], [1.7, 0.4, 0.9]
    assert threshold_rates(s, p, 0.0) == pytest.approx(linear_rates(s, p), rel=1e-15)


def test_saturating_caps_the_slowdown_and_is_linear_for_small_pressure():
    huge = saturating_rates([2.0, 0.0], [0.0, 500.0], 1.5)
    assert huge[0] == pytest.approx(1 / (1 + 2.0 * 1.5))  # at most 1 + s * scale
    s, p = [0.3, 0.8], [1e-4, 2e-4]
    assert saturating_rates(s, p, 1.0) == pytest.approx(linear_rates(s, p), rel=1e-6)
