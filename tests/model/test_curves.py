"""Cost curves on cards, and the fits that make them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from agentsched.errors import CardError
from agentsched.model.cards import ToolCard, load_card_set, parse_card_set
from agentsched.model.curve_fit import FitError, fit_curve, fit_points, fit_power, fit_report
from agentsched.model.curves import MAX_VALUE, CardCurves, ConstantCurve, LinearCurve, PointsCurve, PowerCurve

SIZES = [0.0, 0.5, 1.0, 3.0, 17.0, 512.0, 1e6]


def test_a_constant_card_equals_a_constant_curve():
    plain = ToolCard(name="t", cpu_ms=40.0, gpu_ms=5.0, vram_mb=300.0, load_ms=10.0)
    curved = ToolCard(
        name="t",
        cpu_ms=40.0,
        gpu_ms=5.0,
        vram_mb=300.0,
        load_ms=10.0,
        curves={
            "unit": "pages",
            "cpu_ms": {"kind": "constant", "value": 40.0},
            "gpu_ms": {"kind": "constant", "value": 5.0},
            "vram_mb": {"kind": "constant", "value": 300.0},
        },
    )
    for n in [*SIZES, None]:
        assert plain.cpu_ms_at(n) == curved.cpu_ms_at(n) == 40.0
        assert plain.gpu_ms_at(n) == curved.gpu_ms_at(n) == 5.0
        assert plain.vram_mb_at(n) == curved.vram_mb_at(n) == 300.0


def test_curves_price_each_size_and_amplify():
    card = ToolCard(
        name="emb",
        cpu_ms=50.0,
        gpu_ms=8.0,
        vram_mb=100.0,
        curves={
            "unit": "sentences",
            "cpu_ms": {"kind": "linear", "fixed": 2.0, "per_unit": 3.0},
            "gpu_ms": {"kind": "power", "a": 0.5, "b": 0.5, "c": 6.0},
        },
    )
    assert card.cpu_ms_at(16) == 50.0 and card.cpu_ms_at(100) == 302.0
    assert card.gpu_ms_at(100) == pytest.approx(11.0)
    assert card.cpu_ms_at(None) == 50.0  # size unknown: the constant
    assert card.vram_mb_at(100) == 100.0  # no VRAM curve: the constant
    x3 = card.amplified(3)
    assert x3.cpu_ms_at(100) == pytest.approx(906.0) and x3.gpu_ms_at(100) == pytest.approx(33.0)
    # the card's time crosses over: the CPU is cheaper for small inputs, the GPU for large ones
    assert card.cpu_ms_at(1) < card.gpu_ms_at(1) and card.cpu_ms_at(100) > card.gpu_ms_at(100)


def test_curves_are_bounded_at_odd_sizes():
    curves = [
        ConstantCurve(value=3.0),
        LinearCurve(fixed=1.0, per_unit=MAX_VALUE),
        PowerCurve(a=5.0, b=4.0, c=1.0),
        PointsCurve(points=((1.0, 2.0), (10.0, 20.0))),
    ]
    for c in curves:
        for n in [*SIZES, -5.0, float("nan"), float("inf"), 1e300]:
            v = c.at(n)
            assert 0.0 <= v <= MAX_VALUE


def test_points_interpolate_in_log_log_and_extrapolate_by_the_end_segment():
    c = PointsCurve(points=((1.0, 10.0), (10.0, 100.0), (100.0, 400.0)))
    assert c.at(10.0) == pytest.approx(100.0) and c.at(1.0) == pytest.approx(10.0)
    assert c.at(3.1623) == pytest.approx(31.623, rel=1e-3)  # n**1 between the first two
    assert c.at(1000.0) == pytest.approx(1600.0, rel=1e-6)  # the last segment's exponent, log4/log10


@pytest.mark.parametrize(
    "bad",
    [
        {"unit": "pages"},  # no curve at all
        {"unit": "", "cpu_ms": {"kind": "constant", "value": 1}},
        {"unit": "pages", "cpu_ms": {"kind": "cubic", "value": 1}},
        {"unit": "pages", "cpu_ms": {"kind": "power", "a": 1, "b": 9, "c": 0}},
        {"unit": "pages", "cpu_ms": {"kind": "points", "points": [[2, 1], [1, 2]]}},
        {"unit": "pages", "cpu_ms": {"kind": "linear", "fixed": -1, "per_unit": 1}},
    ],
)
def test_malformed_curves_are_refused(bad):
    with pytest.raises(ValidationError):
        CardCurves.model_validate(bad)


def test_gpu_curve_on_a_host_only_card_is_a_one_line_card_error():
    doc = {"cards": {"t": {"cpu_ms": 3.0, "curves": {"unit": "rows", "gpu_ms": {"kind": "constant", "value": 1}}}}}
    with pytest.raises(CardError) as e:
        parse_card_set(doc, "x")
    assert "\n" not in str(e.value) and "gpu_ms" in str(e.value)


def test_old_card_files_load_unchanged_and_round_trip_with_curves(tmp_path):
    a5500 = load_card_set("a5500")
    assert all(c.curves is None for c in a5500.cards.values())
    assert "curves" not in a5500.to_json()  # old files keep their bytes (and content hashes)
    card = a5500.cards["clip"].model_copy(
        update={
            "curves": CardCurves(unit="images", cpu_ms=LinearCurve(fixed=1.0, per_unit=2.0), fit_error={"cpu_ms": 0.03})
        }
    )
    doc = json.loads(a5500.model_copy(update={"cards": {**a5500.cards, "clip": card}}).to_json())
    back = parse_card_set(doc, "copy")
    assert back.cards["clip"].cpu_ms_at(10) == 21.0 and back.cards["clip"].curves.fit_error == {"cpu_ms": 0.03}


def test_the_fit_recovers_a_known_power_law_from_noisy_samples():
    rng = np.random.default_rng(7)
    n = np.exp(rng.uniform(0, np.log(1000), 60))
    truth = PowerCurve(a=0.8, b=1.4, c=25.0)
    y = np.array([truth.at(x) for x in n]) * np.exp(rng.normal(0, 0.05, len(n)))
    fit = fit_power(n, y)
    assert fit.b == pytest.approx(1.4, abs=0.1)
    for x in (2.0, 30.0, 500.0, 2000.0):  # inside, and twice beyond, the sizes fitted
        assert fit.at(x) == pytest.approx(truth.at(x), rel=0.08)


def test_fit_report_gives_errors_on_and_off_the_points():
    rng = np.random.default_rng(1)
    n = np.repeat([1.0, 4.0, 16.0, 64.0, 256.0], 3)
    y = (3.0 * n + 40.0) * np.exp(rng.normal(0, 0.02, len(n)))
    rep = fit_report("linear", n, y)
    assert rep.size_span == 256.0 and rep.points == 15
    assert rep.median_error < 0.03 and rep.loo_median_error is not None and rep.loo_median_error < 0.06
    assert fit_report("constant", n, y).max_error > 0.5  # the wrong shape shows in the error


def test_fits_refuse_what_they_cannot_fit():
    with pytest.raises(FitError):
        fit_points([5.0, 5.0], [1.0, 2.0])
    with pytest.raises(FitError):
        fit_curve("cubic", [1.0, 2.0], [1.0, 2.0])
    with pytest.raises(FitError):
        fit_power([float("nan")], [1.0])
    assert fit_power([3.0, 3.0], [2.0, 2.0]).at(100.0) == pytest.approx(2.0)  # one size: a constant


def test_the_card_file_example_in_json_md_validates():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text()
    section = text[text.index("### Card files") :]
    block = section[section.index("```json") + len("```json") : section.index("```", section.index("```json") + 7)]
    doc = json.loads("{" + block.strip() + "}")
    card = parse_card_set({"cards": doc}, "doc").cards["minilm_l6"]
    assert card.curves.unit == "sentences" and card.cpu_ms_at(512) > card.cpu_ms_at(16) > 0
    assert card.vram_mb_at(512) == card.vram_mb  # no VRAM curve: the constant


def test_a_spiked_measurement_pulls_the_robust_fit_less():
    truth = LinearCurve(fixed=30.0, per_unit=8.0)
    n = [1.0, 3.0, 8.0, 20.0, 50.0, 120.0, 300.0]
    y = [truth.at(x) for x in n]
    y[3] *= 2.0  # one call preempted for as long again as it ran
    robust, plain = fit_power(n, y, b=1.0), fit_power(n, y, b=1.0, robust=False)
    err = [abs(c.at(500.0) - truth.at(500.0)) / truth.at(500.0) for c in (robust, plain)]
    assert err[0] < 0.05 and err[0] < err[1]
