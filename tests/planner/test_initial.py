"""Round 0's structural rules (``planner/initial.py``): the gpu_now set kept current candidate by
candidate is the set that rechecking every pair at each candidate gives, and keeps every overlap in
the budget."""

from __future__ import annotations

import pytest

from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Mode, Workflow, fits_vram
from agentsched.planner import initial
from agentsched.planner.initial import card_mapping


def _overlaps_fit(wf, mapping) -> bool:
    """Every gpu_now task's VRAM plus the gpu_now tasks that can overlap it stays in the budget."""
    now = [t for t, m in mapping.items() if m is Mode.GPU_NOW]
    cards = wf.task_cards
    return all(
        fits_vram(
            sum(cards[u].vram_needed_mb for u in now if u in wf.concurrent[t]),
            cards[t].vram_needed_mb,
            wf.vram_budget_mb,
        )
        for t in now
    )


def _pairwise_add(workflow, cards, beside_mb, t, budget_mb) -> None:
    """The rule as it was first written: every pair rechecked for each candidate (cubic time)."""
    now = [*beside_mb, t]
    for x in now:
        held_mb = sum(cards[u].vram_needed_mb for u in now if u in workflow.concurrent[x])
        if not fits_vram(held_mb, cards[x].vram_needed_mb, budget_mb):
            return
    beside_mb[t] = 0.0


def _both(wf, monkeypatch):
    got, _ = card_mapping(wf, wf.task_cards)
    with monkeypatch.context() as m:
        m.setattr(initial, "_add_if_fits", _pairwise_add)
        reference, _ = card_mapping(wf, wf.task_cards)
    return got, reference


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("topology", ["fan-out", "random", "layered"])
def test_the_gpu_now_set_is_the_pairwise_rules_and_fits(seed: int, topology: str, monkeypatch) -> None:
    wf = generate_workflow(tasks=9, topology=topology, space="three_way", budget_tightness=0.6, seed=seed)
    got, reference = _both(wf, monkeypatch)
    assert got == reference
    assert wf.vram_budget_mb is not None and _overlaps_fit(wf, got)


def test_sums_at_the_budget_s_edge_add_in_the_order_the_pairwise_rule_did(monkeypatch) -> None:
    """Summed in a set's order, 0.2 + 0.1 + 0.1 beside 1234.56 MB fell on either side of this
    budget by the process's hash seed (a reviewer's case)."""
    vram_mb = [1e-10, 0.2, 0.1, 0.1, 1234.56]
    cards = {f"t{i}": ToolCard(name=f"t{i}", cpu_ms=100, gpu_ms=1, load_ms=0, vram_mb=v) for i, v in enumerate(vram_mb)}
    wf = Workflow(
        name="edge",
        decision_space="three_way",
        vram_budget_mb=1234.9599999990999,
        tasks={f"T{i}": {"tool": f"t{i}"} for i in range(5)},
        edges=[["T1", "T2"], ["T1", "T3"], ["T2", "T3"]],
    ).with_cards(CardSet(name="edge", cards=cards))
    got, reference = _both(wf, monkeypatch)
    assert got == reference and _overlaps_fit(wf, got)
    kept: dict[str, float] = {}
    pairwise: dict[str, float] = {}
    for t in ["T4", "T3", "T2", "T0", "T1"]:  # the reviewer's order of candidates
        initial._add_if_fits(wf, wf.task_cards, kept, t, wf.vram_budget_mb)
        _pairwise_add(wf, wf.task_cards, pairwise, t, wf.vram_budget_mb)
    assert list(kept) == list(pairwise)


def test_a_fan_out_over_budget_gets_some_but_not_all_tasks_on_gpu_now() -> None:
    wf = generate_workflow(tasks=8, topology="fan-out", space="three_way", budget_tightness=0.7, seed=3)
    mapping, _ = card_mapping(wf, wf.task_cards)
    gpu_now = [t for t, m in mapping.items() if m is Mode.GPU_NOW]
    assert gpu_now and _overlaps_fit(wf, mapping)
    assert not _overlaps_fit(wf, {t: Mode.GPU_NOW for t in mapping if wf.task_cards[t].has_gpu})
