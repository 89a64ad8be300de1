"""Online per-size learning, and StarPU's models as baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentsched.model.curves import LinearCurve, PowerCurve
from agentsched.monitor.size_model import SizeModel, StarpuHistory, StarpuRegression, size_residuals

TRUTH = PowerCurve(a=2.0, b=1.2, c=30.0)


def _feed(model, rng, k, truth=TRUTH, sigma=0.05, median=40.0):
    sizes = np.exp(rng.normal(math.log(median), 1.0, k))
    for n in sizes:
        model.observe(float(n), truth.at(n) * math.exp(rng.normal(0, sigma)))
    return sizes


def test_usable_after_five_executions_and_close_inside_the_sizes_seen():
    rng = np.random.default_rng(3)
    m = SizeModel()
    _feed(m, rng, 4)
    assert not m.usable and m.predict(40.0) is None  # cold start, 4 measurements: no answer
    _feed(m, rng, 1)
    lo, hi = m.size_range()
    p = m.predict(math.sqrt(lo * hi))
    assert m.usable and p is not None and p.inside and p.source == "fit"
    assert p.ms == pytest.approx(TRUTH.at(math.sqrt(lo * hi)), rel=0.15)


def test_the_learned_curve_extrapolates_with_a_wider_uncertainty():
    rng = np.random.default_rng(5)
    m = SizeModel()
    _feed(m, rng, 40)
    lo, hi = m.size_range()
    inside, beyond = m.predict(math.sqrt(lo * hi)), m.predict(2 * hi)
    assert not beyond.inside and beyond.rel_sd > inside.rel_sd
    assert beyond.ms == pytest.approx(TRUTH.at(2 * hi), rel=0.15)
    assert beyond.low_ms < beyond.ms < beyond.high_ms


def test_few_measurements_choose_few_parameters():
    rng = np.random.default_rng(0)
    m = SizeModel()
    _feed(m, rng, 6, truth=LinearCurve(fixed=0.0, per_unit=5.0), sigma=0.01)
    assert m.kind in ("linear", "power") and m.curve().at(10.0) == pytest.approx(50.0, rel=0.05)
    flat = SizeModel()
    _feed(flat, rng, 8, truth=LinearCurve(fixed=20.0, per_unit=0.0), sigma=0.02)
    assert flat.kind == "constant"


def test_a_card_curve_answers_before_measurements_and_is_scaled_by_them():
    card = LinearCurve(fixed=10.0, per_unit=1.0)
    m = SizeModel(prior=card)
    p0 = m.predict(100.0)
    assert p0.source == "card" and p0.ms == pytest.approx(110.0)
    for n in (10.0, 50.0):  # this machine is twice as slow as the card says
        m.observe(n, 2 * card.at(n))
    p2 = m.predict(100.0)
    assert p2.ms == pytest.approx(220.0) and p2.rel_sd < p0.rel_sd


def test_residuals_compare_like_with_like():
    """A shift of the traffic to large inputs moves the raw mean, not the residuals; a slower machine moves both."""
    rng = np.random.default_rng(11)
    m = SizeModel()
    _feed(m, rng, 60, sigma=0.03)
    small = [(n, TRUTH.at(n)) for n in np.exp(rng.normal(math.log(10), 0.3, 30))]
    large = [(n, TRUTH.at(n)) for n in np.exp(rng.normal(math.log(200), 0.3, 30))]
    slower = [(n, 1.5 * ms) for n, ms in small]
    assert np.mean([ms for _, ms in large]) > 5 * np.mean([ms for _, ms in small])
    assert abs(np.median(size_residuals(m, large)) - np.median(size_residuals(m, small))) < 0.1
    assert np.median(size_residuals(m, slower)) - np.median(size_residuals(m, small)) == pytest.approx(
        math.log(1.5), abs=0.02
    )
    assert m.zscore(100.0, 3 * TRUTH.at(100.0)) > 5  # a change detector sees a 3x slowdown


def test_bad_measurements_are_refused_and_counted():
    m = SizeModel()
    for size, ms in ((float("nan"), 1.0), (-1.0, 1.0), (5.0, 0.0), (5.0, float("inf")), (5.0, "7")):
        assert m.observe(size, ms) is False
    assert m.rejected == 5 and m.samples == 0
    assert m.predict(float("nan")) is None and m.residual(5.0, -1.0) is None


def test_starpu_regression_waits_for_ten_and_refuses_to_extrapolate():
    rng = np.random.default_rng(2)
    r, ours = StarpuRegression(), SizeModel()
    sizes = []
    for i in range(10):
        n = float(np.exp(rng.normal(math.log(40), 1.0)))
        sizes.append(n)
        r.observe(n, TRUTH.at(n))
        ours.observe(n, TRUTH.at(n))
        if i < 9:
            assert r.predict(n) is None  # StarPU's calibration minimum
    assert r.predict(sizes[0]) == pytest.approx(TRUTH.at(sizes[0]), rel=0.05)
    assert r.predict(2 * max(sizes)) is None and r.predict(0.5 * min(sizes)) is None
    assert ours.predict(2 * max(sizes)) is not None  # the learned curve answers there


def test_starpu_history_answers_per_bucket_after_ten():
    h = StarpuHistory()
    for _ in range(9):
        h.observe(100.0, 50.0)
    assert h.predict(100.0) is None
    h.observe(120.0, 60.0)  # the same power-of-two bucket
    assert h.predict(110.0) == pytest.approx(51.0) and h.predict(300.0) is None


def test_size_models_per_task_and_device_take_the_card_curve_as_prior():
    from agentsched.model.cards import ToolCard
    from agentsched.monitor.size_model import SizeModels

    card = ToolCard(
        name="emb",
        cpu_ms=50.0,
        gpu_ms=8.0,
        vram_mb=10.0,
        curves={"unit": "sentences", "cpu_ms": {"kind": "linear", "fixed": 2.0, "per_unit": 3.0}},
    )
    host = ToolCard(name="pdf", cpu_ms=5.0)
    models = SizeModels({"A": card, "B": host})
    assert models.model("A", on_gpu=False).predict(10.0).ms == pytest.approx(32.0)  # the card's CPU curve
    assert models.model("A", on_gpu=True).predict(10.0) is None  # no GPU curve, no measurement: unknown
    assert models.model("B", on_gpu=True) is models.model("B", on_gpu=False)  # host-only: one device
    assert models.observe("A", True, None, 5.0) is False and models.residual("A", True, 3.0, None) is None
    for n in (1.0, 2.0, 4.0, 8.0, 16.0):
        assert models.observe("A", True, n, 8.0 + n)
    assert models.residual("A", True, 32.0, 40.0) == pytest.approx(0.0, abs=0.05)
    assert SizeModels(None).model("A", on_gpu=False).prior is None  # cold start


def test_the_interval_at_twice_the_sizes_seen_mostly_holds_the_truth_and_narrows_with_data():
    truths = [
        PowerCurve(a=0.01, b=1.3, c=25.0),
        PowerCurve(a=30.0, b=0.9, c=10.0),
        LinearCurve(fixed=60.0, per_unit=2.0),
    ]
    held, widths = [], {5: [], 40: []}
    for seed in range(8):
        for truth in truths:
            for k in (5, 40):
                rng = np.random.default_rng([seed, k])
                m = SizeModel()
                sizes = _feed(m, rng, k, truth=truth, sigma=0.1)
                p = m.predict(2 * float(max(sizes)))
                widths[k].append(p.rel_sd)
                held.append(p.low_ms <= truth.at(2 * float(max(sizes))) <= p.high_ms)
    assert np.mean(held) >= 0.8
    assert np.median(widths[40]) < np.median(widths[5])
