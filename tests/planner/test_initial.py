"""Round 0's structural rules (``planner/initial.py``): the gpu_now set kept current candidate by
candidate gives the set that rechecking every pair gives, and keeps every overlap in the budget."""

from __future__ import annotations

import pytest

from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Mode, fits_vram
from agentsched.planner.initial import card_mapping


def _overlaps_fit(wf, mapping) -> bool:
    """Every gpu_now task's VRAM plus the gpu_now tasks that can overlap it stays in the budget."""
    now = [t for t, m in mapping.items() if m is Mode.GPU_NOW]
    cards = wf.task_cards
    return all(fits_vram(sum(cards[u].vram_needed_mb for u in now if u in wf.concurrent[t]),
                         cards[t].vram_needed_mb, wf.vram_budget_mb) for t in now)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("topology", ["fan-out", "random", "layered"])
def test_gpu_now_set_keeps_every_overlap_in_the_budget(seed: int, topology: str) -> None:
    wf = generate_workflow(tasks=9, topology=topology, space="three_way", budget_tightness=0.6, seed=seed)
    mapping, _ = card_mapping(wf, wf.task_cards)
    assert wf.vram_budget_mb is not None
    assert _overlaps_fit(wf, mapping)
    # maximal: a task the rules could have put on gpu_now and did not would not fit beside the final
    # set (it did not fit beside the smaller set of its turn, and sums only grow)
    for t, m in mapping.items():
        card = wf.task_cards[t]
        if m is not Mode.GPU_NOW and card.has_gpu and (card.speedup or 0.0) >= 1.0:
            assert not _overlaps_fit(wf, {**mapping, t: Mode.GPU_NOW}), t


def test_a_fan_out_over_budget_gets_some_but_not_all_tasks_on_gpu_now() -> None:
    wf = generate_workflow(tasks=8, topology="fan-out", space="three_way", budget_tightness=0.7, seed=3)
    mapping, _ = card_mapping(wf, wf.task_cards)
    gpu_now = [t for t, m in mapping.items() if m is Mode.GPU_NOW]
    assert gpu_now and _overlaps_fit(wf, mapping)
    assert not _overlaps_fit(wf, {t: Mode.GPU_NOW for t in mapping if wf.task_cards[t].has_gpu})
