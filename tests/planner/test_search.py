"""Search: exhaustive when small; local search finds the exhaustive optimum on small cases; seeded."""

from __future__ import annotations

import itertools
import random

import pytest

from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Mode, Workflow
from agentsched.planner.predict import Predictor, TaskParams
from agentsched.planner.search import search, space_size


def predictor(wf: Workflow) -> Predictor:
    return Predictor(
        wf,
        {
            t: TaskParams(c.cpu_ms, c.gpu_ms, c.load_needed_ms, c.vram_needed_mb, 0.5, 0.5)
            for t, c in wf.task_cards.items()
        },
    )


def choices(wf: Workflow):
    return [wf.decision_space.modes if wf.task_cards[t].has_gpu else (Mode.CPU,) for t in wf.task_ids]


def brute(wf: Workflow, pred: Predictor) -> float:
    vals = [pred.predict(k).e2e_ms for k in itertools.product(*choices(wf))]
    return min(v for v in vals if v is not None)


@pytest.mark.parametrize("seed", range(6))
def test_exhaustive_mode_is_the_brute_force_optimum(seed):
    wf = generate_workflow(tasks=6, topology="random", space="three_way", budget_tightness=0.5, seed=seed)
    pred = predictor(wf)
    res = search(lambda k: pred.predict(k).e2e_ms, choices(wf), [], random.Random(0))
    assert res.exhaustive and res.evaluations == space_size(choices(wf))
    assert res.best.e2e_ms == pytest.approx(brute(wf, pred))
    assert [c.e2e_ms for c in res.candidates] == sorted(c.e2e_ms for c in res.candidates)


@pytest.mark.parametrize("seed", range(6))
def test_local_search_finds_the_exhaustive_optimum_on_small_cases(seed):
    wf = generate_workflow(
        tasks=7, topology=["chain", "fan-out", "layered"][seed % 3], space="three_way", budget_tightness=0.3, seed=seed
    )
    pred = predictor(wf)
    cpu = tuple(Mode.CPU for _ in wf.task_ids)
    res = search(
        lambda k: pred.predict(k).e2e_ms, choices(wf), [cpu], random.Random(seed), exhaustive_limit=0, max_evals=600
    )
    assert not res.exhaustive and res.evaluations <= 600
    assert res.best.e2e_ms == pytest.approx(brute(wf, pred), rel=1e-9)


def test_search_is_deterministic_under_a_seed_and_never_returns_infeasible():
    wf = generate_workflow(tasks=30, topology="layered", space="three_way", budget_tightness=0.8, seed=3)
    pred = predictor(wf)
    cpu = tuple(Mode.CPU for _ in wf.task_ids)
    runs = [
        search(lambda k: pred.predict(k).e2e_ms, choices(wf), [cpu], random.Random(7), max_evals=300) for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert all(pred.predict(c.key).feasible for c in runs[0].candidates)
    assert runs[0].best.e2e_ms <= pred.predict(cpu).e2e_ms
