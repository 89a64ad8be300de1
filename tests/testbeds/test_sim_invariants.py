"""Invariants of the simulator on random DAGs, random cards, mappings and budgets."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agentsched import Mode, SimTestbed, Status, Workflow
from agentsched.model.cards import CardSet, ToolCard
from agentsched.testbeds.world import World

MODES = [Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 7))
    cards, contention = {}, {}
    for i in range(n):
        has_gpu = draw(st.booleans()) or i == 0
        cards[f"t{i}"] = ToolCard(
            name=f"t{i}",
            cpu_ms=draw(st.floats(1, 500)),
            gpu_ms=draw(st.floats(1, 200)) if has_gpu else None,
            load_ms=draw(st.floats(0, 300)),
            vram_mb=draw(st.floats(10, 900)),
        )
        contention[f"t{i}"] = {"sensitivity": draw(st.floats(0, 3)), "pressure": draw(st.floats(0, 3))}
    ids = [f"T{i}" for i in range(n)]
    edges = [[ids[a], ids[b]] for a in range(n) for b in range(a + 1, n) if draw(st.integers(0, 3)) == 0]
    budget = draw(st.one_of(st.none(), st.floats(900, 3000)))
    wf = Workflow(
        name="r",
        decision_space="three_way",
        vram_budget_mb=budget,
        tasks={t: {"tool": f"t{i}"} for i, t in enumerate(ids)},
        edges=edges,
    )
    wf = wf.with_cards(CardSet(name="rand", cards=cards))
    mapping = {t: draw(st.sampled_from(MODES)) for t in ids}
    world = World(name="rand", contention=contention, default={"sensitivity": 0.0, "pressure": 0.0})
    return wf, world, mapping, draw(st.integers(0, 2**31)), draw(st.sampled_from([0.0, 0.05]))


@settings(max_examples=300, deadline=None, derandomize=True)  # reproducible in CI
@given(cases())
def test_invariants(case):
    wf, world, mapping, seed, sigma = case
    ex = SimTestbed(noise_sigma=sigma, world=world).run(wf, mapping, rng=random.Random(seed))
    spans = {s.task: s for s in ex.spans}
    eps = 1e-6
    for s in ex.spans:  # dependencies respected
        for p in wf.preds[s.task]:
            assert spans[p].end_ms is not None and spans[p].end_ms <= s.start_ms + eps
        assert s.start_ms + eps >= s.ready_ms
    # the queue is serial (host-only tools on gpu_queue run as CPU tasks, outside it)
    queued = sorted(
        (s for s in ex.spans if s.mode is Mode.GPU_QUEUE and wf.task_cards[s.task].has_gpu), key=lambda s: s.start_ms
    )
    for a, b in zip(queued, queued[1:], strict=False):
        assert a.end_ms is not None and a.end_ms <= b.start_ms + eps
    if ex.status is Status.OK:
        assert set(spans) == set(wf.task_ids)
        assert abs(ex.e2e_ms - max(spans[t].end_ms for t in wf.sinks)) < eps
        assert abs(ex.e2e_ms - max(s.end_ms for s in ex.spans)) < eps
        if wf.vram_budget_mb is not None:  # VRAM never above budget
            assert ex.peak_vram_mb <= wf.vram_budget_mb + eps
            for s in ex.spans:
                held = sum(
                    o.vram_mb for o in ex.spans if o.start_ms <= s.start_ms + eps and o.end_ms > s.start_ms + eps
                )
                assert held <= wf.vram_budget_mb + eps
        for s in ex.spans:  # contention only slows: a task never beats its isolated time by much
            card = wf.task_cards[s.task]
            iso = card.gpu_ms if s.mode is not Mode.CPU and card.has_gpu else card.cpu_ms
            if sigma == 0:
                assert s.run_ms >= iso - 1e-6
    else:
        assert ex.status is Status.OOM
        assert ex.e2e_ms is None
        assert wf.vram_budget_mb is not None and ex.peak_vram_mb > wf.vram_budget_mb
