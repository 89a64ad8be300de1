"""The hard-case generator of ``benchmarks/plan_hard.py`` (issue 45) makes what it says: three-way
workflows of 6-10 tasks, two or more large-model tools, a budget within 1-5% of the best mapping's peak
(real VRAM, in its understated world), and a robust reference no better than the oracle."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from agentsched.model.cards import load_card_set
from agentsched.model.workflow import DecisionSpace

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "hard_cases.py"
_spec = importlib.util.spec_from_file_location("hard_cases", _PATH)
hc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("hard_cases", hc)  # a dataclass needs its module registered
_spec.loader.exec_module(hc)  # type: ignore[union-attr]


def test_a_hard_case_is_tight_large_and_in_an_understated_world():
    case = next(c for c in (hc.hard_case(i, "test", perturbed=True) for i in range(10)) if c is not None)
    wf = case.workflow
    cards = load_card_set("a5500").cards
    assert 6 <= len(wf.tasks) <= 10 and wf.decision_space is DecisionSpace.THREE_WAY
    large = {s.tool for s in wf.tasks.values() if (cards[s.tool].vram_mb or 0) >= hc.LARGE_MODEL_MB}
    assert len(large) >= 2
    assert case.world.startswith("understated:") and ":perturbed:" in case.world
    assert (
        1.01 * case.oracle_peak_mb <= wf.vram_budget_mb + 0.1 and wf.vram_budget_mb <= 1.05 * case.oracle_peak_mb + 0.1
    )
    oracle, robust, mapping = hc.references(case, runs=20)
    assert oracle <= robust and hc.reference_ms(wf, case.world, mapping, {}) == robust


def test_the_same_index_gives_the_same_case_and_another_prefix_another():
    a, b = hc.hard_case(3, "test", False), hc.hard_case(3, "test", False)
    c = hc.hard_case(3, "other", False)
    assert (a is None) == (b is None)
    if a is not None:
        assert a.workflow == b.workflow and a.world == b.world
        assert c is None or c.workflow.name != a.workflow.name
