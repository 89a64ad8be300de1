"""all-gpu, mem-greedy and the oracle reference."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop import run_loop
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import reference_oracle
from agentsched.model import Mode, Status
from agentsched.testbeds import SimTestbed

G, C, Q = Mode.GPU_NOW, Mode.CPU, Mode.GPU_QUEUE


def test_all_gpu_puts_gpu_capable_tools_on_gpu_now(make_workflow, no_contention):
    wf = make_workflow({"a": {"cpu_ms": 14, "gpu_ms": 39}, "web": {"cpu_ms": 127}}, {"A": "a", "W": "web"})
    run = run_loop(wf, make_policy("all-gpu"), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=2, repeats=1)
    # even a CPU-preferred tool: that is the framework default
    assert [r.mapping for r in run.rounds] == [{"A": G, "W": C}] * 2


def test_all_gpu_ignores_the_budget_and_runs_out_of_memory(make_workflow, no_contention):
    wf = make_workflow(
        {"a": {"cpu_ms": 100, "gpu_ms": 10, "vram_mb": 600}}, {"A": "a", "B": "a"}, space="three_way", budget=1000
    )
    run = run_loop(wf, make_policy("all-gpu"), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=2, repeats=1)
    assert [r.status for r in run.rounds] == [Status.OOM, Status.OOM]


S13_LIKE = {  # speedups 80, 20, 16, 2; VRAM 463, 627, 417, 5
    "bert": {"cpu_ms": 12000, "gpu_ms": 150, "vram_mb": 463},
    "clip": {"cpu_ms": 3000, "gpu_ms": 150, "vram_mb": 627},
    "whisper": {"cpu_ms": 2400, "gpu_ms": 150, "vram_mb": 417},
    "tiny": {"cpu_ms": 20, "gpu_ms": 10, "vram_mb": 5},
    "merge": {"cpu_ms": 14, "gpu_ms": 39, "vram_mb": 1},
}


def test_mem_greedy_fills_the_budget_by_speedup_then_stops(make_workflow, make_context):
    wf = make_workflow(
        S13_LIKE, {"A": "clip", "B": "bert", "C": "whisper", "D": "tiny", "E": "merge"}, space="three_way", budget=1100
    )
    pol = make_policy("mem-greedy")
    pol.reset(make_context(wf))
    prop = pol.propose(0)
    # bert (463) then clip (1090) fit; whisper would make 1507 > 1100: the pass ends there, so tiny
    # (which would fit) stays on the CPU too; merge gains nothing from the GPU (speedup < 1).
    assert prop.mapping == {"A": G, "B": G, "C": C, "D": C, "E": C}
    assert prop.info["speedup_order"] == ["B", "A", "C", "D"]


def test_mem_greedy_without_budget_is_gpu_where_faster(make_workflow, make_context):
    wf = make_workflow(S13_LIKE, {"A": "clip", "E": "merge"})
    pol = make_policy("mem-greedy")
    pol.reset(make_context(wf))
    assert pol.propose(0).mapping == {"A": G, "E": C}


def test_oracle_reference_is_offline_and_proposes_the_brute_force_best(make_workflow, no_contention):
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}, "b": {"cpu_ms": 10, "gpu_ms": 100}}, {"A": "a", "B": "b"})
    testbed = SimTestbed(world=no_contention, noise_sigma=0.0)
    given = reference_oracle(wf, testbed)  # the harness searches its own testbed and passes the result
    pol = make_policy("oracle", oracle=given)
    assert pol.online is False
    run = run_loop(wf, pol, testbed, rounds=2, repeats=1)
    assert [r.mapping for r in run.rounds] == [{"A": G, "B": C}] * 2 == [given.best.mapping] * 2
    assert run.records[0].proposal_info == {"oracle_e2e_ms": 10.0}


def test_oracle_reference_refuses_without_the_oracle_or_with_another_workflows(make_workflow, no_contention):
    """A policy never builds a testbed: without the harness's oracle it refuses in one line."""
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}}, {"A": "a"})
    testbed = SimTestbed(world=no_contention, noise_sigma=0.0)
    with pytest.raises(PolicyError, match=r"^policy oracle needs the oracle searched on the run's testbed"):
        run_loop(wf, make_policy("oracle"), testbed, rounds=1, repeats=1)
    other = reference_oracle(wf.model_copy(update={"name": "other"}), testbed)
    with pytest.raises(PolicyError, match=r"^policy oracle was given the oracle of other, not of "):
        run_loop(wf, make_policy("oracle", oracle=other), testbed, rounds=1, repeats=1)
