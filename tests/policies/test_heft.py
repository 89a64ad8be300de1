"""HEFT and HEFT-CF on hand-computed schedules."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop import run_loop
from agentsched.loop.registry import make_policy
from agentsched.model import Mode
from agentsched.policies.heft import HeftPolicy, mean_cost_ms, upward_ranks
from agentsched.testbeds import SimTestbed

G, C = Mode.GPU_NOW, Mode.CPU

DIAMOND_CARDS = {
    "a": {"cpu_ms": 100, "gpu_ms": 10},
    "b": {"cpu_ms": 60, "gpu_ms": 50},
    "c": {"cpu_ms": 40, "gpu_ms": 50},
}


def _propose(policy, wf, make_context):
    policy.reset(make_context(wf))
    return policy.propose(0)


def test_cpu_preferred_tool_goes_to_the_cpu(make_workflow, make_context):
    # doc_merger-like: 39 ms on the GPU (transfer-bound), 14 ms on the CPU
    wf = make_workflow({"merge": {"cpu_ms": 14, "gpu_ms": 39}}, {"A": "merge"})
    assert _propose(make_policy("heft"), wf, make_context).mapping == {"A": C}


def test_tool_without_gpu_implementation_goes_to_the_cpu(make_workflow, make_context):
    wf = make_workflow({"web": {"cpu_ms": 127}}, {"A": "web"})
    assert _propose(make_policy("heft"), wf, make_context).mapping == {"A": C}


def test_diamond_ranks_and_earliest_finish(make_workflow, make_context):
    # A -> (B || C) -> D, one CPU core. Mean costs over q = 2 processors: A 55, B 55, C 45, D 55.
    wf = make_workflow(
        DIAMOND_CARDS, {"A": "a", "B": "b", "C": "c", "D": "a"}, edges=[("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")]
    )
    cards = wf.task_cards
    ranks = upward_ranks(wf, {t: mean_cost_ms(cards[t], 1) for t in wf.task_ids})
    assert ranks == {"D": 55.0, "B": 110.0, "C": 100.0, "A": 165.0}
    p = HeftPolicy(cpu_cores=1)
    prop = _propose(p, wf, make_context)
    # A: GPU 10 < CPU 100. B (ready 10): GPU 60 < CPU 70. C (ready 10): CPU 50 < GPU 60.
    # D (ready 60): GPU 70 < CPU 160.
    assert prop.mapping == {"A": G, "B": G, "C": C, "D": G}
    assert prop.info["planned_makespan_ms"] == 70.0
    assert prop.info["planned"]["C"] == ["cpu0", 10.0, 50.0]


def test_heft_is_contention_blind_and_heft_cf_is_not(make_workflow, make_context):
    # Two independent tasks. Ranks (2 cores + GPU): A (100 + 2*1000)/3 = 700, B (100 + 2*140)/3.
    # A goes first to the GPU (100 < 1000). B: isolated GPU 100 < CPU 140 for HEFT; HEFT-CF sees A
    # running beside it: 100 * (1 + 0.5 * 1) = 150 > 140, so the CPU.
    wf = make_workflow(
        {"a": {"cpu_ms": 1000, "gpu_ms": 100}, "b": {"cpu_ms": 140, "gpu_ms": 100}}, {"A": "a", "B": "b"}
    )
    assert _propose(make_policy("heft"), wf, make_context).mapping == {"A": G, "B": G}
    assert _propose(make_policy("heft-cf"), wf, make_context).mapping == {"A": G, "B": C}
    # a factor small enough keeps B on the GPU: 100 * 1.3 = 130 < 140
    assert _propose(make_policy("heft-cf", contention_factor=0.3), wf, make_context).mapping == {"A": G, "B": G}


def test_budget_in_three_way_keeps_heft_feasible_and_off_the_queue(make_workflow, make_context):
    # Both want the GPU; 600 + 600 > 1000, so the lower-ranked B goes to the CPU.
    wf = make_workflow(
        {"a": {"cpu_ms": 100, "gpu_ms": 10, "vram_mb": 600}, "b": {"cpu_ms": 50, "gpu_ms": 10, "vram_mb": 600}},
        {"A": "a", "B": "b"},
        space="three_way",
        budget=1000,
    )
    for name in ("heft", "heft-cf"):
        assert _propose(make_policy(name), wf, make_context).mapping == {"A": G, "B": C}


def test_heft_is_static_across_rounds(make_workflow, no_contention):
    wf = make_workflow(DIAMOND_CARDS, {"A": "a", "B": "b"})
    run = run_loop(wf, make_policy("heft"), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=3, repeats=1)
    assert [r.mapping for r in run.rounds] == [{"A": G, "B": G}] * 3


@pytest.mark.parametrize(
    "name,opts,msg",
    [
        ("heft", {"cpu_cores": 0}, "policy heft: cpu_cores must be an integer >= 1, got 0"),
        ("heft-cf", {"contention_factor": -1}, "policy heft-cf: contention_factor must be >= 0, got -1"),
    ],
)
def test_bad_options(name, opts, msg):
    with pytest.raises(PolicyError) as e:
        make_policy(name, **opts)
    assert str(e.value) == msg
