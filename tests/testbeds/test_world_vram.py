"""Worlds whose cards understate VRAM: validated, seen by the simulator's start rules only."""

from __future__ import annotations

import pytest

from agentsched.errors import WorldError
from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Mode
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.world import VramUnderstatement, load_world, parse_world


def test_understated_world_scales_some_tools_within_the_range_and_keeps_the_base():
    w = load_world("understated:3:perturbed:5")
    base = load_world("perturbed:5")
    assert w.contention == base.contention and w.vram is not None and base.vram is None
    factors = [w.vram.factor(t) for t in ("clip", "ocr", "bert_base", "llama_3b", "reranker", "resnet50")]
    assert all(f == 1.0 or 1.05 <= f <= 1.30 for f in factors) and any(f > 1 for f in factors)
    assert w.vram.factor("clip_x12") == w.vram.factor("clip")  # an amplified tool is its base tool


def test_the_simulator_admits_by_the_real_vram_the_cards_stay_as_they_are():
    wf = generate_workflow(tasks=6, space="three_way", budget_tightness=0.3, seed=1)
    gpu = [t for t, c in wf.task_cards.items() if c.has_gpu]
    # every GPU tool 20% over its card: a mapping that fits by the cards exactly no longer does
    w = parse_world(
        {
            "default": {"sensitivity": 0.4, "pressure": 0.3},
            "vram": {"tools": {wf.task_cards[t].name: 1.2 for t in gpu}},
        },
        "over",
    )
    t = max(gpu, key=lambda t: wf.task_cards[t].vram_mb)
    card_mb = wf.task_cards[t].vram_mb
    mapping = {u: (Mode.GPU_NOW if u == t else Mode.CPU) for u in wf.task_ids}
    exact = SimTestbed(noise_sigma=0).run(wf, mapping)
    over = SimTestbed(noise_sigma=0, world=w).run(wf, mapping)
    assert exact.ok and exact.peak_vram_mb == pytest.approx(card_mb)
    assert over.peak_vram_mb == pytest.approx(1.2 * card_mb) or not over.ok
    assert wf.task_cards[t].vram_mb == card_mb  # the workflow's card is untouched


def test_bad_vram_options_are_one_line_errors():
    with pytest.raises(WorldError, match="vram"):
        parse_world({"default": {"sensitivity": 0, "pressure": 0}, "vram": {"low": 1.3, "high": 1.1}}, "x")
    with pytest.raises(WorldError, match="vram"):
        parse_world({"default": {"sensitivity": 0, "pressure": 0}, "vram": {"tools": {"clip": -1}}}, "x")
    with pytest.raises(WorldError, match="understated"):
        load_world("understated:x")
    assert VramUnderstatement(share=0).factor("clip") == 1.0
