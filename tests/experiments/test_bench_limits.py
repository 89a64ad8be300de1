"""The bench and a workflow too large for one policy (ucb1's arm cap): that policy is skipped there,
with a note and a ``skipped`` entry in results.json, checked before any oracle; the others run."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agentsched.errors import PolicyError
from agentsched.experiments import bench
from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.experiments.results import results_dict, results_schema
from agentsched.testbeds.spec import TestbedSpec
from tests.support.big_workflow import CAP_LINE, TINY, write_big

NO_CONTENTION = str(Path(__file__).parent.parent / "data" / "workflows" / "no_contention_world.json")


@pytest.fixture
def big(tmp_path) -> str:
    return write_big(tmp_path)


def _config(*scenarios: str, policies: tuple[str, ...]) -> BenchConfig:
    return BenchConfig(
        scenarios=scenarios,
        policies=policies,
        rounds=1,
        repeats=1,
        seeds=(0,),
        testbed=TestbedSpec(noise_sigma=0.0, world=NO_CONTENTION),
    )


def test_a_policy_over_its_cap_is_skipped_on_that_workflow_only(big):
    labels: list[str] = []
    res = run_bench(_config(TINY, big, policies=("all-gpu", "ucb1")), progress=labels.append)
    assert [(r.scenario, r.policy) for r in res.records] == [("tiny", "all-gpu"), ("tiny", "ucb1"), ("big", "all-gpu")]
    assert res.notes == [f"ucb1 skipped on big: {CAP_LINE}"]
    assert labels[-1] == "big ucb1 seed 0 (skipped)" and len(labels) == 4  # the progress still reaches its total
    doc = json.loads(json.dumps(results_dict(res)))
    jsonschema.validate(doc, results_schema())
    assert doc["skipped"] == [{"scenario": "big", "policy": "ucb1", "reason": CAP_LINE}]
    assert set(doc["oracles"]) == {"tiny", "big"}


def test_a_workflow_no_policy_can_run_gets_no_oracle(big, monkeypatch):
    searched: list[str] = []
    reference = bench._reference
    monkeypatch.setattr(bench, "_reference", lambda wf, *a: searched.append(wf.name) or reference(wf, *a))
    res = run_bench(_config(TINY, big, policies=("ucb1",)))
    assert searched == ["tiny"] and list(res.workflows) == ["tiny"]
    assert res.notes == [f"ucb1 skipped on big: {CAP_LINE}"]


def test_no_runnable_pair_is_one_line_before_any_oracle(big, monkeypatch):
    def no_oracle(*a):
        raise AssertionError("an oracle was computed before the policies' limits were checked")

    monkeypatch.setattr(bench, "_reference", no_oracle)
    with pytest.raises(PolicyError) as e:
        run_bench(_config(big, policies=("ucb1",)))
    assert str(e.value) == f"no chosen policy (ucb1) can run any benched workflow: {CAP_LINE}"
