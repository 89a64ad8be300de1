"""The predictor, given the simulator's own figures, equals the simulator's noise-free execution."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import PolicyError
from agentsched.model.generate import generate_workflow
from agentsched.model.mapping import enumerate_mappings
from agentsched.model.workflow import Workflow
from agentsched.planner.predict import Predictor, TaskParams
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import load_world


def sim_params(wf: Workflow, world: str | None = None) -> dict[str, TaskParams]:
    """The simulator's own figures: cards plus its world (a test may read them; the planner never does)."""
    w = load_world(world)
    return {
        t: TaskParams(c.cpu_ms, c.gpu_ms, c.load_needed_ms, c.vram_needed_mb, *w.params(c))
        for t, c in wf.task_cards.items()
    }


def assert_same(wf: Workflow, mappings, cpu_slots=None, world=None) -> int:
    tb = SimTestbed(noise_sigma=0.0, cpu_slots=cpu_slots, world=world)
    pred = Predictor(wf, sim_params(wf, world), cpu_slots=cpu_slots)
    feasible = 0
    for m in mappings:
        x, p = tb.expected(wf, m), pred.predict(m)
        assert x.ok == p.feasible, (wf.name, m)
        assert p.peak_vram_mb == pytest.approx(x.peak_vram_mb, rel=1e-9, abs=1e-9)
        if x.ok:
            feasible += 1
            assert p.e2e_ms == pytest.approx(x.e2e_ms, rel=1e-9)
        else:
            assert p.failed_task == x.extra["failed_task"]
    return feasible


@pytest.mark.parametrize("name", list_scenarios())
def test_every_mapping_of_every_scenario(name):
    wf = load_scenario(name)
    assert assert_same(wf, list(enumerate_mappings(wf))) > 0


@pytest.mark.parametrize("seed", range(12))
def test_random_dags(seed):
    rng = random.Random(seed)
    wf = generate_workflow(
        tasks=rng.randint(3, 30),
        topology=rng.choice(["chain", "fan-out", "layered", "random"]),
        space=rng.choice(["binary", "three_way"]),
        budget_tightness=rng.choice([0.0, 0.4, 0.7]),
        seed=seed,
    )
    modes = wf.decision_space.modes
    maps = [{t: rng.choice(modes) for t in wf.task_ids} for _ in range(25)]
    assert_same(wf, maps, cpu_slots=rng.choice([None, 2]), world=rng.choice([None, f"perturbed:{seed}"]))


def test_timeline_matches_prediction_and_cache_counts_once():
    wf = load_scenario("S13")
    pred = Predictor(wf, sim_params(wf))
    m = next(iter(enumerate_mappings(wf)))
    tl = pred.timeline(m)
    assert tl.prediction == pred.predict(m)
    assert max(tl.end_ms[t] for t in wf.sinks) == pytest.approx(tl.prediction.e2e_ms)
    before = pred.evaluations
    pred.predict(m)
    assert pred.evaluations == before  # cached


def test_missing_estimate_is_one_line_error():
    wf = load_scenario("S1")
    params = sim_params(wf)
    params.pop(wf.task_ids[0])
    with pytest.raises(PolicyError, match="no estimate for task"):
        Predictor(wf, params)


@pytest.mark.parametrize("seed", range(5))
def test_the_focus_overlap_test_equals_comparing_every_pair(seed):
    """critical_focus keeps the GPU tasks whose run meets a critical GPU task's; the bisection over
    sorted starts and running max ends must say what testing every pair says (ties and empty runs too)."""
    from agentsched.planner.predict import _overlap_test

    rng = random.Random(seed)

    def interval():
        a = rng.choice([0.0, 10.0, rng.uniform(0, 100)])
        return a, a + rng.choice([0.0, 5.0, rng.uniform(0, 50)])

    path = [interval() for _ in range(rng.randint(0, 12))]
    overlaps = _overlap_test(path)
    for _ in range(300):
        s, e = interval()
        assert overlaps(s, e) == any(s < b and a < e for a, b in path)
