"""Paper figures only for the built-in scenarios themselves; duplicate names; the S13 ablation's cards."""

from __future__ import annotations

import json

from agentsched.experiments.bench import ablation_workflow
from agentsched.experiments.paper import is_paper_scenario
from agentsched.scenarios import load_scenario, resolve_workflow

FAKE_S13 = """name: S13
cards: a5500
decision_space: binary
tasks:
  A: {tool: clip}
  B: {tool: groupby}
edges: [[A, B]]
"""


def test_only_the_built_in_scenario_is_a_paper_scenario(tmp_path):
    assert is_paper_scenario(load_scenario("S13"))
    assert is_paper_scenario(load_scenario("S5"))
    fake = tmp_path / "fake.yaml"
    fake.write_text(FAKE_S13)
    assert not is_paper_scenario(resolve_workflow(str(fake)))
    same_but_budget = tmp_path / "budget.yaml"
    same_but_budget.write_text(
        load_scenario("S13").description
        and "name: S13\ncards: a5500\ndecision_space: three_way\nvram_budget_mb: 2000\n"
        "tasks:\n  A: {tool: clip, repeat: 12}\n  B: {tool: bert_base, repeat: 12}\n"
        "  C: {tool: whisper_base, repeat: 4}\n  D: {tool: groupby, repeat: 60}\nedges: []\n"
    )
    assert not is_paper_scenario(resolve_workflow(str(same_but_budget)))


def test_bench_rejects_two_scenarios_with_one_name(cli, tmp_path):
    fake = tmp_path / "other.yaml"
    fake.write_text(FAKE_S13)
    code, out, err = cli(
        "bench",
        "--scenarios",
        f"S13,{fake}",
        "--policies",
        "heft",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "out"),
    )
    assert code != 0 and out == ""
    assert err.splitlines() == [f"error: --scenarios names workflow S13 twice (S13, {fake})"]
    assert not (tmp_path / "out").exists()


def test_bench_shows_no_paper_figures_for_a_file_named_like_a_scenario(cli, tmp_path):
    fake = tmp_path / "fake.yaml"
    fake.write_text(FAKE_S13)
    code, out, err = cli(
        "bench",
        "--scenarios",
        str(fake),
        "--policies",
        "heft",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--no-ablation",
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    oracle = json.loads((tmp_path / "out" / "results.json").read_text())["oracles"]["S13"]
    assert oracle["paper_mapping"] is None and oracle["paper_e2e_ms"] is None
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Table 5" not in report.split("## Oracles")[1].split("\n## ", 1)[1]  # no Table 5 section for it


def test_the_s13_ablation_is_skipped_up_front_when_s13_does_not_resolve(tmp_path):
    cards = tmp_path / "cards.json"
    cards.write_text(json.dumps({"name": "few", "cards": {"groupby": {"cpu_ms": 10}}}))
    wf, note = ablation_workflow(str(cards))
    assert wf is None and note.startswith(f"the S13 ablation skipped: S13 does not resolve under --cards {cards} (")
    assert ablation_workflow(None)[0] == load_scenario("S13")
