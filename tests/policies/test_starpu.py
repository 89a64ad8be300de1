"""StarPU dmda-like: card values until measured, then history means; serial GPU worker."""

from __future__ import annotations

from agentsched.loop import run_loop
from agentsched.loop.registry import make_policy
from agentsched.model import Mode
from agentsched.testbeds import SimTestbed

G, C = Mode.GPU_NOW, Mode.CPU

# Two independent tools that slow each other to half speed on the GPU (s = p = 1: rate 1/(1+1)).
CARDS = {"a": {"cpu_ms": 350, "gpu_ms": 100}, "b": {"cpu_ms": 300, "gpu_ms": 100}}
CONTENTION = {"a": (1.0, 1.0), "b": (1.0, 1.0)}  # the simulated world's (sensitivity, pressure)


def test_model_updates_after_a_measurement_and_the_decision_follows(make_workflow, make_world):
    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    pol = make_policy("starpu")
    run = run_loop(wf, pol, SimTestbed(noise_sigma=0.0, world=make_world(CONTENTION)), rounds=3, repeats=2)
    m = [r.mapping for r in run.rounds]
    # R0, cards: A GPU 100 < 350; B waits for the serial GPU worker: 100 + 100 = 200 < 300 -> GPU.
    assert m[0] == {"A": G, "B": G}
    assert run.records[0].proposal_info["expected_ms"]["A"] == {"cpu": 350.0, "gpu": 100.0}
    # R0 runs both together at half speed: both measure 200 ms. R1: A GPU 200 < 350;
    # B: 200 + 200 = 400 > 300 -> CPU.
    assert run.records[1].proposal_info["expected_ms"]["B"] == {"cpu": 300.0, "gpu": 200.0}
    assert m[1] == {"A": G, "B": C}
    # R1: A alone measures 100 ms twice -> mean (200*2 + 100*2) / 4 = 150 when R2 is proposed.
    assert run.records[2].proposal_info["expected_ms"]["A"] == {"cpu": 350.0, "gpu": 150.0}
    assert m[2] == {"A": G, "B": C}  # B: 150 + 200 = 350 > 300
    # after R2 (A alone again): (200*2 + 100*4) / 6; B's CPU measured 4 times at 300
    assert pol.history[("a", "gpu")] == (800.0, 6)
    assert pol.history[("b", "cpu")] == (1200.0, 4)
    assert pol.expected_ms("B", "gpu") == 200.0  # never re-measured: greedy, no exploration


def test_card_values_before_any_measurement(make_workflow, make_context):
    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    pol = make_policy("starpu")
    pol.reset(make_context(wf))
    assert (pol.expected_ms("A", "cpu"), pol.expected_ms("A", "gpu")) == (350.0, 100.0)


def test_oom_spans_give_no_samples(make_workflow, no_contention):
    # All-GPU over budget fails at t=0 in every round; StarPU can only learn from complete spans.
    wf = make_workflow(
        {"a": {"cpu_ms": 5000, "gpu_ms": 10, "vram_mb": 600}}, {"A": "a", "B": "a"}, space="three_way", budget=1000
    )
    pol = make_policy("starpu")
    run = run_loop(wf, pol, SimTestbed(world=no_contention, noise_sigma=0.0), rounds=2, repeats=1)
    # the VRAM guard keeps StarPU itself feasible: A GPU, B CPU
    assert run.rounds[0].mapping == {"A": G, "B": C}
    assert pol.history == {("a", "gpu"): (20.0, 2), ("a", "cpu"): (10000.0, 2)}


def test_tasks_are_planned_in_ready_order_then_file_order(make_workflow, make_context):
    # host-only tools: everything on the CPU. D (second in the file) is ready at 100 ms, after A;
    # C (last) at 10 ms, after B: dmda takes them by ready time, ties (A, B at 0) by file order
    wf = make_workflow(
        {"slow": {"cpu_ms": 100, "gpu_ms": None}, "fast": {"cpu_ms": 10, "gpu_ms": None}},
        {"A": "slow", "D": "fast", "B": "fast", "C": "fast"},
        edges=[("A", "D"), ("B", "C")],
    )
    pol = make_policy("starpu")
    pol.reset(make_context(wf))
    plan = pol.plan()
    assert list(plan) == ["A", "B", "C", "D"]
    assert [(plan[t].start_ms, plan[t].finish_ms) for t in plan] == [(0, 100), (0, 10), (10, 20), (100, 110)]


def test_a_round_with_nothing_to_judge_teaches_no_timing(make_workflow, make_world):
    from tests.support.host_down import HostDown

    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    pol = make_policy("starpu")
    tb = HostDown(SimTestbed(noise_sigma=0.0, world=make_world(CONTENTION)), failing=2)
    run = run_loop(wf, pol, tb, rounds=2, repeats=2)  # R0's runs fail in host code, after their tools ran
    assert not run.rounds[0].judged
    assert run.rounds[1].mapping == run.rounds[0].mapping == {"A": G, "B": G}  # still the cards' plan
    # R1's runs only (200 ms each); R0's would have made it 4 samples each
    assert pol.history == {("a", "gpu"): (400.0, 2), ("b", "gpu"): (400.0, 2)}
