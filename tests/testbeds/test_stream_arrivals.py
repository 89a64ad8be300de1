"""Arrival streams: rates, determinism, bursts, trace files and their one-line errors."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import TestbedError
from agentsched.testbeds.arrivals import bursty_arrivals, make_arrivals, poisson_arrivals, read_trace


def test_poisson_rate_and_mix():
    arr = poisson_arrivals(10.0, 200.0, 3, random.Random(1))
    assert 1800 < len(arr) < 2200  # 2000 expected; +-10% is > 4 sigma
    assert all(0 <= a.time_ms < 200_000 for a in arr)
    assert [a.time_ms for a in arr] == sorted(a.time_ms for a in arr)
    assert {a.workflow for a in arr} == {0, 1, 2}


def test_same_seed_same_stream():
    a = poisson_arrivals(5.0, 50.0, 2, random.Random(7))
    b = poisson_arrivals(5.0, 50.0, 2, random.Random(7))
    assert a == b
    assert a != poisson_arrivals(5.0, 50.0, 2, random.Random(8))


def test_bursty_keeps_the_mean_rate_in_bursts():
    arr = bursty_arrivals(10.0, 400.0, 1, random.Random(3))
    assert 3000 < len(arr) < 5000
    gaps = [b.time_ms - a.time_ms for a, b in zip(arr, arr[1:], strict=False)]
    assert max(gaps) > 1000.0  # off periods: gaps far above the 100 ms mean gap


def test_trace_file(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("# time, workflow\n0.5,S2\n0.1,S1\n\n2,S1\n")
    arr = read_trace(f, ["S1", "S2"])
    assert [(a.time_ms, a.workflow) for a in arr] == [(100.0, 0), (500.0, 1), (2000.0, 0)]
    assert make_arrivals(f"trace:{f}", rate_per_s=1, duration_s=1, names=["S1", "S2"], rng=random.Random()) == arr


@pytest.mark.parametrize(
    "text, needle",
    [
        ("1,S9\n", "unknown workflow"),
        ("x,S1\n", "not a number"),
        ("1\n", "expected TIME_S,WORKFLOW"),
        ("-1,S1\n", r"in \[0, "),
        ("\n", "no arrivals"),
        # finite in s, not in ms: it stalled the simulator, misleadingly
        ("1e308,S1\n", r"bad.csv:1: time must be a number of seconds in \[0, 1,000,000\]"),
    ],
)
def test_bad_trace_is_one_line(tmp_path, text, needle):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(TestbedError, match=needle) as e:
        read_trace(f, ["S1"])
    assert "\n" not in str(e.value)


def test_bad_arguments():
    with pytest.raises(TestbedError, match="rate"):
        poisson_arrivals(0.0, 1.0, 1, random.Random())
    with pytest.raises(TestbedError, match="unknown arrival kind"):
        make_arrivals("uniform", rate_per_s=1, duration_s=1, names=["a"], rng=random.Random())
    with pytest.raises(TestbedError, match="cannot read"):
        read_trace("/nonexistent/trace.csv", ["a"])


@pytest.mark.parametrize(
    "duration_s, message",
    [
        (0.0, "duration must be a finite number > 0"),
        (float("nan"), "duration must be a finite number > 0"),
        (2e6, "duration 2,000,000 s: at most 1,000,000 simulated seconds"),
    ],
)
def test_a_bad_duration_is_one_line(duration_s, message):
    with pytest.raises(TestbedError, match=message):
        poisson_arrivals(1e-9, duration_s, 1, random.Random())
