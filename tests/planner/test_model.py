"""The online model: observations from timelines, the fit recovers known parameters, uncertainty shrinks."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.mapping import enumerate_mappings
from agentsched.model.workflow import Mode, Workflow
from agentsched.planner.model import PlanModel, unit_of
from agentsched.planner.timeline import gpu_segments, observe
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import World

# known truth: three GPU tools with distinct contention, cards exact
TRUTH = {"a": (2.0, 0.2), "b": (0.3, 1.5), "c": (0.8, 0.6)}


TRUTH_WORLD = World(
    name="truth",
    contention={n: {"sensitivity": s, "pressure": p} for n, (s, p) in TRUTH.items()},
    default={"sensitivity": 0.0, "pressure": 0.0},
)


def truth_workflow() -> Workflow:
    cards = {
        n: ToolCard(name=n, cpu_ms=2000.0, gpu_ms=100.0 * (i + 1), load_ms=50.0, vram_mb=100.0, tags=("compute-bound",))
        for i, n in enumerate(TRUTH)
    }
    wf = Workflow(
        name="truth", tasks={"A": {"tool": "a"}, "B": {"tool": "b"}, "C": {"tool": "c"}}, decision_space="three_way"
    )
    return wf.with_cards(CardSet(name="truth-cards", cards=cards))


def fitted(runs: int, seed: int = 0) -> tuple[PlanModel, Workflow]:
    wf = truth_workflow()
    cards = wf.task_cards
    model = PlanModel.for_workflow(wf, cards, {t: c.tags for t, c in cards.items()})
    tb = SimTestbed(noise_sigma=0.02, world=TRUTH_WORLD)
    rng = random.Random(seed)
    maps = [m for m in enumerate_mappings(wf) if sum(v is Mode.GPU_NOW for v in m.values()) >= 2]
    for _ in range(runs):
        x = tb.run(wf, rng.choice(maps), rng=rng)
        model.add(observe(x, lambda s: model.has_gpu(s.task)))
    return model, wf


def test_segments_cut_at_every_overlap():
    runs = {r.task: r for r in gpu_segments([("A", 0.0, 10.0, True), ("B", 4.0, 6.0, True), ("C", 8.0, 20.0, False)])}
    assert runs["A"].segments == ((4.0, ()), (2.0, ("B",)), (2.0, ()), (2.0, ("C",)))
    assert runs["B"].segments == ((2.0, ("A",)),)
    assert "C" not in runs  # unfinished: no observation of its own
    assert runs["A"].run_ms == 10.0 and not runs["A"].isolated


def test_unit_of_amplified_tools():
    assert unit_of("clip", 12) == ("clip", 12)
    assert unit_of("clip_x3", 2) == ("clip", 6)


def test_fit_recovers_the_identifiable_contention():
    """s and p are identified up to one common factor (s*c, p/c give the same rates), so the fit is
    checked on what a timeline determines: every pairwise slowdown s_i * p_j, and the latencies."""
    model, wf = fitted(60)
    fit = model.fit()
    est = {u: fit.contention(u)[:2] for u in TRUTH}
    for i, (si, _) in TRUTH.items():
        for j, (_, pj) in TRUTH.items():
            if i != j:
                assert est[i][0] * est[j][1] == pytest.approx(si * pj, rel=0.15), (i, j)
    params = model.params(fit)
    for t, c in wf.task_cards.items():
        assert params[t].gpu_ms == pytest.approx(c.gpu_ms, rel=0.05)
    assert 0.01 <= fit.noise_sigma <= 0.05


def test_uncertainty_shrinks_with_data():
    few, _ = fitted(2)
    many, _ = fitted(60)
    assert np.all(many.fit().sd() < few.fit().sd())


def test_no_data_gives_the_prior():
    wf = truth_workflow()
    model = PlanModel.for_workflow(wf, wf.task_cards, {t: ("compute-bound",) for t in wf.task_ids})
    fit = model.fit()
    assert fit.gpu_runs == 0
    s, p, sd_s, sd_p = fit.contention("a")
    assert (s, p) == pytest.approx((0.4, 0.5))  # the planner's own prior for compute-bound tags
    assert sd_s == pytest.approx(1.2) and sd_p == pytest.approx(1.2)
    samples = model.samples(4, np.random.default_rng(0), fit)
    assert len({round(sm["A"].sensitivity, 9) for sm in samples}) == 4


def test_cold_model_learns_latencies_from_runs():
    wf = truth_workflow()
    model = PlanModel.for_workflow(wf, None, {t: ("compute-bound",) for t in wf.task_ids})
    tb = SimTestbed(noise_sigma=0.0, world=TRUTH_WORLD)
    for m in ({t: Mode.CPU for t in wf.task_ids}, {t: Mode.GPU_QUEUE for t in wf.task_ids}):
        model.add(observe(tb.expected(wf, m), lambda s: model.has_gpu(s.task)))
    params = model.params()
    for t, c in wf.task_cards.items():
        assert params[t].cpu_ms == pytest.approx(c.cpu_ms, rel=0.01)
        assert params[t].gpu_ms == pytest.approx(c.gpu_ms, rel=0.01)
        assert params[t].load_ms == pytest.approx(50.0, rel=0.01)
        assert params[t].vram_mb == 100.0
    assert math.isfinite(model.fit().noise_sigma)
