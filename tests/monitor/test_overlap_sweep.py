"""The monitor's Factor-A overlap test: the sweep flags exactly the spans the pairwise definition does."""

import random
from dataclasses import dataclass

import pytest

from agentsched.monitor.overlap import overlapping


@dataclass(frozen=True)
class Span:
    task: str
    start_ms: float
    load_ms: float
    end_ms: float


def _pairwise(spans):
    out = set()
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if a.start_ms + a.load_ms < b.end_ms and b.start_ms + b.load_ms < a.end_ms:
                out |= {a.task, b.task}
    return out


@pytest.mark.parametrize("seed", range(40))
def test_sweep_equals_the_pairwise_definition(seed):
    rng = random.Random(seed)
    spans = []
    for i in range(rng.randrange(0, 30)):
        start = float(rng.choice([0, 10, 20, rng.uniform(0, 500)]))
        load = float(rng.choice([0, 0, 5, rng.uniform(0, 50)]))
        length = float(rng.choice([0, 1, 10, rng.uniform(0, 200)])) if seed % 5 == 0 else rng.uniform(0.5, 200)
        spans.append(Span(f"T{i}", start, load, start + load + length))
    assert {s.task for s in overlapping(spans)} == _pairwise(spans)


def test_touching_intervals_do_not_overlap():
    a, b = Span("A", 0, 0, 10), Span("B", 10, 0, 20)
    assert overlapping([a, b]) == []
    c = Span("C", 5, 0, 15)
    assert {s.task for s in overlapping([a, b, c])} == {"A", "B", "C"}
