"""Change detection: Page-Hinkley fires on a step change, not on stationary noise (seeded)."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import PolicyError
from agentsched.planner.change import ChangeWatch, PageHinkley, first_change, ph_update


def noise(seed: int, n: int, shift: float = 0.0, at: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, 1.0) + (shift if i >= at else 0.0) for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_stationary_noise_never_fires(seed):
    assert first_change(noise(seed, 400)) is None


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("shift", [3.0, -3.0])
def test_a_step_change_fires_soon_after_the_step_in_its_direction(seed, shift):
    got = first_change(noise(seed, 200, shift, at=100))
    assert got is not None
    index, direction = got
    assert 100 <= index < 100 + 12  # ~threshold / (|shift| - delta) samples after the step
    assert direction == (1 if shift > 0 else -1)


def test_one_straggler_alone_is_not_a_change():
    zs = [0.0] * 20 + [50.0] + [0.0] * 20
    assert first_change(zs) is None


def test_state_is_immutable_and_bad_input_is_one_line_error():
    s0 = PageHinkley()
    s1, d = ph_update(s0, 1.0)
    assert s0.n == 0 and s1.n == 1 and d == 0
    with pytest.raises(PolicyError, match="finite"):
        ph_update(s0, float("nan"))
    with pytest.raises(PolicyError, match="threshold"):
        ph_update(s0, 0.0, threshold=0.0)


def test_watch_restarts_every_stream_after_a_detection():
    w = ChangeWatch()
    w.feed("tasks", 0.5)
    fired = [w.feed("measured", 3.0) for _ in range(10)]
    assert 1 in fired
    assert w.states == {} or all(s.n <= fired[::-1].index(1) for s in w.states.values())
    # the model stream needs more evidence than the re-run streams (its residuals err while the model learns)
    w2 = ChangeWatch()
    n_model = next(i for i in range(100) if w2.feed("model", 3.0))
    w3 = ChangeWatch()
    n_measured = next(i for i in range(100) if w3.feed("measured", 3.0))
    assert n_model > n_measured
