"""The prompt builder: golden prompts for S5 (warm and cold) and no target mapping in any prompt.

Golden files are compared exactly. To regenerate them deliberately (after a template change, which
should also bump PROMPT_VERSION): AGENTSCHED_REGEN_GOLDEN=1 python -m pytest tests/agent/test_agent_prompt.py
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest

from agentsched.agent.policy import AgentPolicy
from agentsched.agent.prompt import PROMPT_VERSION, build_prompt, load_template
from agentsched.loop.runner import run_loop
from agentsched.model.cards import CardSet, ToolCard
from agentsched.scenarios import load_scenario
from tests.support.scripted_testbed import ScriptedTestbed, workflow
from tests.support.views import as_labels, complete_mappings, round0_view

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("AGENTSCHED_REGEN_GOLDEN") == "1"


def s5_cards() -> CardSet:
    """The paper's Table 1 rows for S5's tools, frozen here so the golden prompts never follow a refit."""

    def card(name, workload, cpu, gpu, load, vram, tags):
        return ToolCard(name=name, workload=workload, cpu_ms=cpu, gpu_ms=gpu, load_ms=load, vram_mb=vram, tags=tags)

    return CardSet(
        name="golden-s5",
        cards={
            "ocr": card("ocr", "TrOCR handwriting", 1386, 176, 3244, 248, ("compute-bound", "autoregressive")),
            "whisper_base": card(
                "whisper_base", "Whisper-Base ASR", 473, 35, 1792, 442, ("compute-bound", "autoregressive")
            ),
            "vector_search": card(
                "vector_search", "Top-k similarity search", 43, 18, 14701, 3106, ("memory-bound", "large-index")
            ),
            "image_resize": card("image_resize", "Bilinear resize", 17, 4, 4008, 340, ("memory-bound", "elementwise")),
        },
    )


def s5():
    return load_scenario("S5").with_cards(s5_cards())


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_golden_s5_round0_prompt(start):
    text = build_prompt(round0_view(s5(), start)).text()
    path = GOLDEN / f"S5_{start}.{PROMPT_VERSION}.txt"
    if REGEN:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; regenerate with AGENTSCHED_REGEN_GOLDEN=1"
    assert text == path.read_text()


def test_cold_prompt_has_no_profile_figures():
    text = build_prompt(round0_view(s5(), "cold")).user
    for figure in ("2772", "3106", "14701", "645", "Tool cards"):
        assert figure not in text
    assert "Top-k similarity search (x15)" in text and "memory-bound, large-index" in text


def test_warm_prompt_has_cards_and_ratio_guideline():
    text = build_prompt(round0_view(s5(), "warm")).user
    assert "| C | vector_search_x15 | Top-k similarity search (x15) | 645 | 270 | 2.4 |" in text
    assert "ratio >= 7: keep it on the GPU" in text
    assert "gpu_queue" not in text  # binary space: no queue semantics


def test_three_way_prompt_has_structural_rules_not_ratios():
    text = build_prompt(round0_view(load_scenario("S13"), "warm")).user
    assert "Structural rules for a three-way decision space" in text
    assert "Queue load-cost trade-off" in text and "Queue timeline" in text
    assert "ratio >= 7" not in text
    assert "VRAM budget: 1100 MB" in text


@pytest.mark.parametrize("name", ["S5", "S13", "S1"])
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_round0_prompt_states_no_complete_mapping(name, start):
    wf = load_scenario(name)
    text = build_prompt(round0_view(wf, start)).text()
    assert complete_mappings(text, wf.task_ids) == []


def test_templates_state_no_mapping():
    root = resources.files("agentsched.agent").joinpath("prompts")
    names = [p.name for p in root.iterdir() if p.name.endswith(f".{PROMPT_VERSION}.md")]
    assert len(names) >= 8
    for n in names:
        text = load_template(n.split(".")[0])
        assert complete_mappings(text, ["A", "B", "C", "D"]) == [], n


def test_later_prompt_only_names_executed_mappings():
    # run a few rounds on the scripted testbed, then render the next prompt: every complete mapping it
    # contains is one of the history's rounds (what-ifs are written relative, e.g. "C->gpu_now")
    wf = workflow(budget_mb=800)
    policy = AgentPolicy("rules", start="cold")
    run = run_loop(wf, policy, ScriptedTestbed(slowdown=1.5), rounds=4, repeats=1)
    text = build_prompt(policy.view(4)).text()
    executed = [as_labels(r.mapping) for r in run.rounds]
    found = complete_mappings(text, wf.task_ids)
    assert found, "the history stream lists the executed rounds"
    assert all(m in executed for m in found)
    assert "what-if" in text or "SWAP" in text or "re-measure" in text or "Running averages" in text


def test_complete_mapping_detector_sees_both_styles():
    assert complete_mappings("R1: A=gpu_now,B=cpu,C=gpu_queue,D=cpu ->", list("ABCD")) == [
        {"A": "gpu", "B": "cpu", "C": "gpu_queue", "D": "cpu"}
    ]
    assert complete_mappings('{"A": "gpu", "B": "cpu", "C": "cpu", "D": "gpu"}', list("ABCD"))
    assert complete_mappings('{"A": "<mode>", ...}', list("ABCD")) == []


def test_golden_s5_predictions_block_after_one_round():
    # the optional fifth stream (AgentPolicy predictions=True): S5 (frozen cards), warm, after one round of
    # five runs on the simulated testbed (default world, seed 0) and the monitor's probes; only the block
    # is compared, so a change elsewhere in the prompt does not touch this file
    from agentsched.testbeds.sim import SimTestbed

    policy = AgentPolicy("rules", predictions=True)
    run_loop(s5(), policy, SimTestbed(), rounds=1, repeats=5, seed=0)
    user = build_prompt(policy.view(1)).user
    block = user[user.index("## 5. Model predictions") : user.index("## 6. Guidance")]
    path = GOLDEN / f"S5_predictions_R1.{PROMPT_VERSION}.txt"
    if REGEN:
        path.write_text(block)
    assert path.exists(), f"missing golden file {path}; regenerate with AGENTSCHED_REGEN_GOLDEN=1"
    assert block == path.read_text()


def test_an_endless_run_has_no_last_round_in_the_prompt():
    """A runtime's run is endless (rounds=None): the prompt says so instead of "R0..R999999999"."""
    wf = load_scenario("S5")
    text = build_prompt(round0_view(wf, rounds=None)).user
    assert "# Round R0 of an endless run (no last round)" in text and "R0..R" not in text
    assert "# Round R0 of R0..R19" in build_prompt(round0_view(wf, rounds=20)).user


def test_a_round_with_nothing_to_judge_is_not_written_as_infeasible():
    from tests.support.host_down import HOST_ERROR, HostDown

    wf = workflow(budget_mb=800)
    policy = AgentPolicy("rules")
    run_loop(wf, policy, HostDown(ScriptedTestbed(), failing=1), rounds=1, repeats=1)  # R0's run: host code failed
    lines = [ln for ln in build_prompt(policy.view(1)).user.splitlines() if ln.startswith("R0: ")]
    assert len(lines) == 1 and "infeasible" not in lines[0]
    assert lines[0].endswith(
        f"-> ERROR, not the mapping's doing: nothing to judge: every run failed in host code ({HOST_ERROR})"
    )
