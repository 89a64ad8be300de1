"""The bench harness: records, summary, results.json against its schema, report.md, plots."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.experiments.results import results_dict, results_schema
from agentsched.report.outputs import write_outputs
from agentsched.testbeds.spec import TestbedSpec

TINY = str(Path(__file__).parent.parent / "data" / "workflows" / "tiny.yaml")
NO_CONTENTION = str(
    Path(__file__).parent.parent / "data" / "workflows" / "no_contention_world.json"
)  # tiny.yaml's world


@pytest.fixture(scope="module")
def small_bench():
    cfg = BenchConfig(
        scenarios=(TINY, "S2", "S12"),
        policies=("all-gpu", "ucb1", "oracle"),
        rounds=4,
        repeats=2,
        seeds=(0, 1),
        gantt_scenario="S12",
        testbed=TestbedSpec(noise_sigma=0.0, world=NO_CONTENTION),
    )
    return run_bench(cfg)  # one bench, one world: S2 and S12 run without contention here too


def test_one_record_per_scenario_policy_seed(small_bench):
    keys = [(r.scenario, r.policy, r.seed) for r in small_bench.records]
    assert keys == [
        (s, p, seed) for s in ("tiny", "S2", "S12") for p in ("all-gpu", "ucb1", "oracle") for seed in (0, 1)
    ]
    assert all(r.metrics.executions == 8 for r in small_bench.records)  # 4 rounds x 2, no probes


def test_metrics_on_the_tiny_workflow_are_exact(small_bench):
    by = {(r.policy, r.seed): r.metrics for r in small_bench.records if r.scenario == "tiny"}
    # oracle: A=gpu, B=cpu at 10 ms every round, noise-free: no regret
    assert (by["oracle", 0].best_ratio, by["oracle", 0].regret, by["oracle", 0].first_equivalent_round) == (1.0, 0.0, 0)
    assert small_bench.records[-1].online is False
    # all-GPU: 100 ms every round -> ratio 10, regret (100 - 10) / 10 = 9, B misplaced
    ag = by["all-gpu", 0]
    assert (ag.best_ratio, ag.final_ratio, ag.regret, ag.best_match) == (10.0, 10.0, 9.0, 1)
    # UCB1: 4 arms in 4 rounds, each once -> it meets the oracle exactly once: regret 3 x 90 x 2 / (10 x 8)
    u = by["ucb1", 0]
    assert (u.best_match, u.best_ratio, u.regret) == (2, 1.0, 6.75)


def test_summary_aggregates_seeds(small_bench):
    rows = {(s.scenario, s.policy): s for s in small_bench.summary()}
    u = rows["tiny", "ucb1"]
    assert (u.seeds, u.best_match_median, u.full_match_seeds, u.first_equivalent_reached) == (2, 2, 2, 2)
    assert rows["tiny", "all-gpu"].best_ratio_mean == 10.0


def test_results_json_matches_its_schema(small_bench):
    doc = json.loads(json.dumps(results_dict(small_bench)))
    jsonschema.validate(doc, results_schema())
    assert doc["oracles"]["tiny"]["mapping"] == {"A": "gpu_now", "B": "cpu"}
    assert doc["oracles"]["tiny"]["paper_mapping"] is None
    assert doc["oracles"]["S12"]["paper_mapping"] == {"A": "gpu_now", "B": "gpu_now", "C": "gpu_now", "D": "cpu"}
    rec = doc["records"][0]
    assert [r["executions"] for r in rec["rounds"]] == [2, 4, 6, 8]
    assert rec["rounds"][0]["mapping"] == {"A": "gpu_now", "B": "gpu_now"}


def test_schema_rejects_a_broken_document(small_bench):
    doc = json.loads(json.dumps(results_dict(small_bench)))
    del doc["records"][0]["rounds"][0]["status"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, results_schema())


def test_outputs_report_and_plots(small_bench, tmp_path):
    paths = write_outputs(small_bench, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == [
        "convergence.png",
        "e2e_normalised.png",
        "gantt_S12_all_gpu_vs_oracle.png",
        "report.md",
        "results.json",
    ]
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "report.md").read_text()
    assert "## Table 4: best oracle match within the rounds, S1-S10" in md
    assert "## Table 5: three-way decision space with a VRAM budget, S11-S13" in md
    assert "## Other workflows: best oracle match" in md
    # the paper's own figures beside ours: UCB1 on S2 (4/4 in Table 4), S12's oracle E2E and mem-greedy
    ucb1_row = next(line for line in md.splitlines() if line.startswith("| ucb1 |") and "/ 4" in line)
    assert ucb1_row.endswith("|")
    assert "798 +- 38 (n=18)" in md and "/ 845" in md
    assert "| oracle (offline reference) |" in md
    assert "![convergence.png](convergence.png)" in md
