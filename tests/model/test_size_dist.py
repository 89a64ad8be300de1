"""Size distributions of workflow inputs: seeded draws, the shapes asked for, and bad plans refused."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from pydantic import ValidationError

from agentsched.model.size_dist import LogNormalSizes, ParetoSizes, SizePlan

PLAN = {
    "inputs": {
        "audio": {"kind": "lognormal", "median": 60.0, "sigma": 1.0},
        "pdf": {"kind": "pareto", "minimum": 2.0, "alpha": 1.2, "max": 5000},
        "trace": {"kind": "trace", "sizes": [1, 2, 3]},
    },
    "tasks": {"A": {"input": "audio"}, "B": {"input": "pdf", "factor": 0.5}, "C": {"input": "trace"}},
}


def test_the_same_seed_draws_the_same_sizes_and_tasks_follow_their_input():
    plan = SizePlan.model_validate(PLAN)
    a = [plan.draw(random.Random(7), i) for i in range(5)]
    b = [plan.draw(random.Random(7), i) for i in range(5)]
    assert a == b
    ins = plan.draw_inputs(random.Random(3))
    got = plan.draw(random.Random(3))
    assert got["A"] == ins["audio"] and got["B"] == pytest.approx(0.5 * ins["pdf"])
    assert [plan.draw(random.Random(0), i)["C"] for i in range(4)] == [1, 2, 3, 1]  # a trace replays in order


def test_lognormal_and_pareto_have_the_shapes_asked_for():
    rng = random.Random(1)
    ln = LogNormalSizes(median=50.0, sigma=1.0)
    xs = [ln.draw(rng) for _ in range(20_000)]
    assert statistics.median(xs) == pytest.approx(50.0, rel=0.05)
    assert statistics.stdev(math.log(x) for x in xs) == pytest.approx(1.0, rel=0.05)
    pa = ParetoSizes(minimum=10.0, alpha=1.5, max=1e4)
    ys = [pa.draw(rng) for _ in range(20_000)]
    assert min(ys) >= 10.0 and max(ys) <= 1e4
    assert statistics.median(ys) == pytest.approx(10.0 * 2 ** (1 / 1.5), rel=0.05)
    assert sum(y > 100 for y in ys) / len(ys) == pytest.approx(10**-1.5, rel=0.15)  # the tail P(X > 10 min)


@pytest.mark.parametrize(
    "bad",
    [
        {"inputs": {}},
        {"inputs": {"a": {"kind": "lognormal", "median": -1, "sigma": 1}}},
        {"inputs": {"a": {"kind": "pareto", "minimum": 1, "alpha": 0}}},
        {"inputs": {"a": {"kind": "trace", "sizes": []}}},
        {"inputs": {"a": {"kind": "trace", "sizes": [1, -2]}}},
        {"inputs": {"a": {"kind": "uniform", "low": 1}}},
        {"inputs": {"a": {"kind": "lognormal", "median": 1, "sigma": 1}}, "tasks": {"T": {"input": "b"}}},
    ],
)
def test_bad_plans_are_refused(bad):
    with pytest.raises(ValidationError):
        SizePlan.model_validate(bad)
