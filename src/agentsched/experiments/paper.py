"""The paper's figures, looked up from ``agentsched.data.paper_tables`` (experiments only: no policy
may import this module)."""

from __future__ import annotations

from typing import Any

from agentsched.data import paper_tables
from agentsched.errors import AgentschedError
from agentsched.model.workflow import Mode, Workflow

_PAPER_MODE = {"gpu": "gpu_now", "gpu_now": "gpu_now", "cpu": "cpu", "gpu_queue": "gpu_queue"}
ABLATION_SCENARIO = "S13"  # the only workflow the paper's Table 6 ablates


def is_paper_scenario(wf: Workflow, cards: str | None = None) -> bool:
    """True when ``wf`` IS the built-in scenario of its name (the same tasks, edges, budget, decision
    space and card set; ``cards``: the bench's --cards rebinding of the built-in), so the paper's
    figures apply to it; a workflow file that merely calls itself S13 gets none."""
    from agentsched.scenarios import list_scenarios, load_scenario

    if wf.name not in list_scenarios():
        return False
    try:
        ref = load_scenario(wf.name)
        if cards:
            ref = ref.with_cards(cards)
    except AgentschedError:
        return False
    return (
        wf.tasks == ref.tasks
        and tuple(map(tuple, wf.edges)) == tuple(map(tuple, ref.edges))
        and wf.vram_budget_mb == ref.vram_budget_mb
        and wf.decision_space == ref.decision_space
        and wf.card_set == ref.card_set
    )


def paper_first_match_rounds() -> dict[str, int]:
    """The paper's first full-match round of its LLM agent per scenario (Table 5: S11 R2, S12 R1, S13 R3)."""
    t5 = paper_tables()["table5_three_way_S11_S13"]
    col = t5["columns"].index("first_full_match_round")
    return {s: row[col] for s, row in t5["rows"].items()}


def paper_oracle(scenario: str) -> dict[str, Any] | None:
    """The paper's oracle mapping (Table 3) and E2E (Figure 5 / Table 5) for a built-in scenario."""
    t3 = paper_tables()["table3_scenarios"]
    row = t3["rows"].get(scenario)
    if row is None:
        return None
    mapping = {t: _PAPER_MODE[m] for t, m in zip("ABCD", row[-1], strict=True)}
    e2e = t3.get("oracle_e2e_ms_figure5", {}).get(scenario)
    t5 = paper_tables()["table5_three_way_S11_S13"]["rows"].get(scenario)
    if e2e is None and t5 is not None:
        e2e = float(str(t5[3]).split()[0])  # "1715 +- 24 (n=15)"
    return {"mapping": mapping, "e2e_ms": e2e}


def paper_oracle_mapping(workflow: Workflow, scenario: str) -> dict[str, Mode]:
    """The paper's Table 3 oracle mapping of ``scenario`` over ``workflow``'s task ids."""
    row = paper_tables()["table3_scenarios"]["rows"][scenario]
    return {t: Mode(_PAPER_MODE[m]) for t, m in zip(workflow.task_ids, row[-1], strict=True)}


def paper_table6() -> dict[str, list[Any]]:
    """The paper's Table 6 rows (best match, best E2E ms), for display beside ours (S13 only)."""
    return dict(paper_tables()["table6_S13_ablation"]["rows"])
