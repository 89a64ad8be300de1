"""Noise shapes: the draws are pure functions of the injected rng, heavier-tailed where asked,
and sigma 0 gives expected values whatever the shape."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from agentsched import SimTestbed, load_scenario
from agentsched.errors import WorldError
from agentsched.model.mapping import enumerate_mappings
from agentsched.testbeds.noise import Noise, noise_factor, student_t_factor


def _factors(noise: Noise, n: int = 4000, sigma: float = 0.1, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [noise_factor(rng, sigma, noise) for _ in range(n)]


def test_the_default_shape_is_exp_of_one_gauss_draw():
    rng_a, rng_b = random.Random(5), random.Random(5)
    assert [noise_factor(rng_a, 0.2, Noise()) for _ in range(50)] == [
        math.exp(rng_b.gauss(0.0, 0.2)) for _ in range(50)
    ]


def test_student_t_has_heavier_tails_than_the_log_normal():
    normal = [abs(math.log(f)) for f in _factors(Noise())]
    heavy = [abs(math.log(f)) for f in _factors(Noise(kind="student_t", df=3))]
    beyond = 3 * 0.1  # three sigma
    assert sum(x > beyond for x in heavy) > 5 * max(1, sum(x > beyond for x in normal))
    assert statistics.median(heavy) == pytest.approx(statistics.median(normal), rel=0.25)  # same scale


def test_a_student_t_draw_is_clipped_to_a_factor_of_100():
    factors = _factors(Noise(kind="student_t", df=0.3), n=2000, sigma=1.0)
    assert max(factors) <= 100.0 + 1e-9 and min(factors) >= 0.01 - 1e-12
    assert max(factors) == pytest.approx(100.0)  # df 0.3 reaches the clip


def test_stragglers_take_the_factor_with_their_probability():
    noise = Noise(straggler_probability=0.1, straggler_factor=4.0)
    factors = _factors(noise, n=5000, sigma=0.01)
    slow = sum(f > 2 for f in factors) / len(factors)
    assert 0.08 < slow < 0.12
    assert all(3.5 < f < 4.5 for f in factors if f > 2)


@pytest.mark.parametrize("sigma", [-0.1, math.nan, math.inf])
def test_student_t_factor_refuses_a_bad_sigma(sigma):
    with pytest.raises(WorldError, match="^sigma must be finite and >= 0, got "):
        student_t_factor(random.Random(0), sigma, 3.0)


@pytest.mark.parametrize("df", [0.0, -1.0, math.nan, 2e6])
def test_student_t_factor_refuses_a_bad_df(df):
    with pytest.raises(WorldError, match=r"^df must be in \(0, 1e\+06\], got "):
        student_t_factor(random.Random(0), 0.1, df)


def test_heavy_noise_runs_are_reproducible_by_seed_and_differ_from_the_default():
    wf = load_scenario("S11")
    maps = list(enumerate_mappings(wf))[:20]

    def e2e(world: str, seed: str) -> list[float | None]:
        tb, rng = SimTestbed(noise_sigma=0.1, world=world), random.Random(seed)
        return [tb.run(wf, m, rng=rng).e2e_ms for m in maps]

    assert e2e("a5500-heavy", "a") == e2e("a5500-heavy", "a")
    assert e2e("a5500-heavy", "a") != e2e("a5500-heavy", "b")
    assert e2e("a5500-heavy", "a") != e2e("a5500", "a")


def test_sigma_0_gives_expected_values_whatever_the_shape():
    wf = load_scenario("S11")
    for m in list(enumerate_mappings(wf))[:20]:
        heavy = SimTestbed(noise_sigma=0.0, world="a5500-heavy").run(wf, m, rng=random.Random(1))
        assert heavy.e2e_ms == SimTestbed(noise_sigma=0.0).run(wf, m).e2e_ms
        noisy = SimTestbed(noise_sigma=0.2, world="a5500-heavy")
        assert noisy.expected(wf, m).e2e_ms == heavy.e2e_ms
