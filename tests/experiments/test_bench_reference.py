"""`agentsched bench` (the default run) gives the same figures as before the layer-contracts change:
the summary, the oracles and the ablation tables of tests/data/bench_summary_v0_1.json (wall times aside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.experiments.results import results_dict
from agentsched.loop.registry import baseline_policies

REFERENCE = Path(__file__).parent.parent / "data" / "bench_summary_v0_1.json"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def bench_doc(reference) -> dict:
    cfg = reference["config"]
    config = BenchConfig(
        scenarios=tuple(cfg["scenarios"]),
        policies=tuple(cfg["policies"]),
        rounds=cfg["rounds"],
        repeats=cfg["repeats"],
        seeds=tuple(cfg["seeds"]),
        ablation=cfg["ablation"],
    )
    return json.loads(json.dumps(results_dict(run_bench(config))))


@pytest.mark.slow
def test_the_reference_is_the_default_bench(reference):
    cfg = reference["config"]
    assert cfg["policies"] == [*baseline_policies(), "oracle", "agent-rules", "agent-rules-cold"]  # the v0.1 default
    assert len(cfg["scenarios"]) == 13 and cfg["seeds"] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_summary_rows_equal_the_reference(bench_doc, reference):
    assert len(bench_doc["summary"]) == len(reference["summary"]) == 117
    for ours, ref in zip(bench_doc["summary"], reference["summary"], strict=True):
        # fields are only ever added (docs/json.md): every reference field is unchanged
        assert {k: ours.get(k) for k in ref} == ref, f"{ref['scenario']} {ref['policy']}"


@pytest.mark.slow
def test_oracles_and_ablation_equal_the_reference(bench_doc, reference):
    assert bench_doc["oracles"] == reference["oracles"]
    ablation = bench_doc["ablation"]
    assert ablation.pop("world") == "a5500"  # named since the world left the cards; the reference predates it
    for table in ablation["tables"]:
        for v in table["variants"]:
            v.pop("runs")
    assert ablation == reference["ablation"]
