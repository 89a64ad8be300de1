"""Metric definitions on hand-made oracles."""

from __future__ import annotations

import pytest

from agentsched.loop import OracleView, oracle_view, reference_oracle, run_loop, run_metrics
from agentsched.loop.metrics import best_oracle_match, first_equivalent_round
from agentsched.loop.registry import make_policy
from agentsched.model import Mode
from agentsched.testbeds import SimTestbed

G, C = Mode.GPU_NOW, Mode.CPU


def test_ties_with_a_tool_without_gpu_count_as_oracle_mappings(make_workflow, no_contention):
    # W has no GPU implementation: W=gpu and W=cpu tie exactly
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}, "web": {"cpu_ms": 5}}, {"A": "a", "W": "web"})
    view = oracle_view(wf, reference_oracle(wf, SimTestbed(world=no_contention, noise_sigma=0.0)))
    assert view.e2e_ms == 10.0
    assert sorted(tuple(m.values()) for m in view.best_mappings) == [(G, C), (G, G)]
    assert best_oracle_match([{"A": G, "W": G}], view.best_mappings) == 2
    assert best_oracle_match([{"A": C, "W": G}], view.best_mappings) == 1
    assert best_oracle_match([], view.best_mappings) == 0


def test_first_equivalent_round_uses_the_two_percent_tolerance():
    view = OracleView(
        workflow="t",
        task_ids=("A", "B"),
        e2e_ms=100.0,
        best={"A": G, "B": C},
        best_mappings=({"A": G, "B": C},),
        equivalent_mappings=({"A": G, "B": C}, {"A": G, "B": G}),
        reference_e2e_ms={(G, C): 100.0, (G, G): 102.0, (C, G): 102.1, (C, C): None},
        mappings_total=4,
        feasible_total=3,
    )
    cc, cg, gg, gc = ({"A": C, "B": C}, {"A": C, "B": G}, {"A": G, "B": G}, {"A": G, "B": C})
    assert not view.equivalent(cc)  # infeasible
    assert not view.equivalent(cg)  # 2.1% over
    assert view.equivalent(gg)  # exactly 2% over
    assert first_equivalent_round([cc, cg, gg, gc], view) == 2
    assert first_equivalent_round([cc, cg], view) is None
    assert view.reference(cg) == 102.1


def test_best_match_counts_against_oracle_equivalent_mappings(make_workflow, make_world):
    # B is off the critical path: on the GPU it adds 1% to A through contention (101 vs 100 ms), on
    # the CPU it takes 50 ms. Both are oracle-equivalent; a run placing B on the GPU fully matches.
    wf = make_workflow({"a": {"cpu_ms": 1000, "gpu_ms": 100}, "b": {"cpu_ms": 50, "gpu_ms": 100}}, {"A": "a", "B": "b"})
    tb = SimTestbed(world=make_world({"a": (0.01, 0.0), "b": (0.0, 1.0)}), noise_sigma=0.0)
    view = oracle_view(wf, reference_oracle(wf, tb))
    assert view.best == {"A": G, "B": C} and view.e2e_ms == 100.0
    # together: B runs 100 ms; A does 100 / 1.01 ms of work meanwhile, then the rest alone
    assert view.reference({"A": G, "B": G}) == pytest.approx(100.0 + (100.0 - 100.0 / 1.01))
    assert [tuple(m.values()) for m in view.equivalent_mappings] == [(G, C), (G, G)]
    run = run_loop(wf, make_policy("all-gpu"), tb, rounds=1, repeats=1)
    m = run_metrics(run, view)
    assert (m.best_match, m.best_match_exact, m.first_equivalent_round) == (2, 1, 0)
