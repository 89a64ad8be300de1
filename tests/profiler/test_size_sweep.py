"""The profiler's sweep over input sizes: inputs made at each size, a curve fitted, its error reported.

Time is a fake clock the tools advance by a known cost, so the test checks the fit, not the machine."""

from __future__ import annotations

import types

import pytest

import agentsched
from agentsched.model.tool import register_tool
from agentsched.profiler import sizes as sweep_mod
from agentsched.profiler.profiler import ProfileError
from agentsched.profiler.sizes import card_curves, default_sizes, scale_inputs, sweep_sizes

CLOCK = {"s": 0.0}


def _cost_ms(n: float) -> float:
    return 5.0 + 0.5 * n  # the tool's true curve: a fixed cost plus a per-unit slope


class Pages(agentsched.Tool):
    """Declares its unit and how to make inputs of a size."""

    has_gpu = False
    size_unit = "pages"

    def run(self, inputs):
        CLOCK["s"] += _cost_ms(self.size(inputs)) / 1000

    def size(self, inputs):
        return float(len(inputs["pages"]))

    def sized_inputs(self, size):
        return {"pages": ["p"] * max(1, round(size))}

    def example_inputs(self):
        return {"pages": ["p"] * 8}


class Text(agentsched.Tool):
    """Only example inputs: the profiler scales them (size in bytes)."""

    has_gpu = False

    def run(self, inputs):
        CLOCK["s"] += _cost_ms(len(inputs["text"])) / 1000

    def example_inputs(self):
        return {"text": "abcd" * 25}


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    monkeypatch.setattr(sweep_mod, "time", types.SimpleNamespace(perf_counter=lambda: CLOCK["s"]))


def test_sweep_with_sized_inputs_recovers_the_curve():
    s = sweep_sizes(register_tool(Pages), "cpu", sizes=[1, 4, 16, 64], runs=2, kind="linear")
    assert s.unit == "pages" and s.sizes == [1.0, 4.0, 16.0, 64.0] and s.span == 64
    assert s.fit.curve.at(100.0) == pytest.approx(_cost_ms(100.0), rel=1e-6) and s.fit.median_error < 1e-6
    curves = card_curves([s])
    assert curves.unit == "pages" and curves.cpu_ms.at(32) == pytest.approx(21.0) and "cpu_ms" in curves.fit_error


def test_sweep_scales_example_inputs_and_spans_ten_times_by_default():
    s = sweep_sizes(register_tool(Text), "cpu", runs=1, kind="power")
    assert s.unit == "bytes" and s.span >= 10 and s.fit.loo_median_error is not None
    assert s.fit.curve.at(300.0) == pytest.approx(_cost_ms(300.0), rel=0.02)


@pytest.mark.parametrize("sizes", [[1, 2, 4], [0, 5, 50], [1, 10]])
def test_a_sweep_must_span_ten_times_with_sizes_above_zero(sizes):
    with pytest.raises(ProfileError, match="size"):
        sweep_sizes(register_tool(Pages), "cpu", sizes=sizes)


def test_default_sizes_and_scaling():
    assert default_sizes(1, integer=True) == [1.0, 2.0, 4.0, 8.0, 16.0]  # 1/4 and 1/2 round to 1: doubled to >= 10x
    sizes = default_sizes(16, integer=True)
    assert sizes[0] == 4 and sizes[-1] / sizes[0] >= 10
    assert scale_inputs({"t": "ab", "b": b"xyz", "l": [1], "n": 3}, 3.0) == {
        "t": "ababab",
        "b": b"xyzxyzxyz",
        "l": [1, 1, 1],
        "n": 3,
    }


def test_profile_curves_writes_cost_curves_into_the_cards(cli, tmp_path):
    path = register_tool(Pages)
    out = tmp_path / "cards.json"
    code, stdout, err = cli(
        "profile",
        "--tools",
        path,
        "--runs",
        "2",
        "--warmup",
        "0",
        "--busy",
        "ignore",
        "--curves",
        "--out",
        str(out),
        "--json",
    )
    assert code == 0, err
    import json

    doc = json.loads(stdout)
    card = doc["card_set"]["cards"][path]
    assert card["curves"]["unit"] == "pages" and card["curves"]["ref_size"] == 8.0
    assert doc["curves"][0]["fit"]["points"] >= 4 and doc["curves"][0]["fit"]["size_span"] >= 10
    from agentsched.model.cards import load_card_set

    back = load_card_set(out).cards[path]
    assert back.cpu_ms_at(100.0) == pytest.approx(_cost_ms(100.0), rel=1e-3)
