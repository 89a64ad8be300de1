"""UCB1: tries every arm once before repeating, then follows the UCB1 index."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop import run_loop
from agentsched.loop.registry import make_policy
from agentsched.model import Mode
from agentsched.model.mapping import mapping_key
from agentsched.testbeds import SimTestbed

G, C, Q = Mode.GPU_NOW, Mode.CPU, Mode.GPU_QUEUE

# A is GPU-preferred, B CPU-preferred, no contention: E2E of (A, B) placements:
# (gpu, cpu) = 10, every other mapping = 100. Lower bound = 10, so rewards are 1.0 and 0.1.
CARDS = {"a": {"cpu_ms": 100, "gpu_ms": 10}, "b": {"cpu_ms": 10, "gpu_ms": 100}}


def test_explores_every_arm_before_repeating_then_follows_the_index(make_workflow, no_contention):
    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    run = run_loop(
        wf, make_policy("ucb1"), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=8, repeats=1, seed=3
    )
    keys = [mapping_key(wf, r.mapping) for r in run.rounds]
    assert len(set(keys[:4])) == 4  # the 4 arms, each once
    best = (G, C)
    # Round 4 (t=4, every arm played once, equal bonus): the best mean wins.
    # Round 5: best 1 + sqrt(2 ln 5 / 2) = 2.269 > others 0.1 + sqrt(2 ln 5) = 1.894.
    # Round 6: best 1 + sqrt(2 ln 6 / 3) = 2.093 > 0.1 + sqrt(2 ln 6) = 1.993.
    # Round 7: best 1 + sqrt(2 ln 7 / 4) = 1.986 < 0.1 + sqrt(2 ln 7) = 2.073: back to exploring.
    assert keys[4:7] == [best, best, best]
    assert keys[7] != best
    assert [r.proposal_info["phase"] for r in run.records] == ["explore"] * 4 + ["ucb"] * 4


def test_reward_is_lower_bound_over_e2e_and_zero_when_infeasible(make_workflow, no_contention):
    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    run = run_loop(wf, make_policy("ucb1"), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=4, repeats=1)
    p_rewards = sorted(r.proposal_info["mean_reward"] for r in run.records)
    assert p_rewards == [0.0] * 4  # nothing was played before each proposal
    pol = make_policy("ucb1")
    run = run_loop(wf, pol, SimTestbed(world=no_contention, noise_sigma=0.0), rounds=4, repeats=1)
    assert sorted(pol.reward_sum) == [0.1, 0.1, 0.1, 1.0]


def test_arms_exclude_certainly_infeasible_mappings(make_workflow, no_contention):
    # three-way, A and B 600 MB each, budget 1000: only (gpu_now, gpu_now) must run out of memory
    wf = make_workflow(
        {"a": {"cpu_ms": 100, "gpu_ms": 10, "vram_mb": 600}}, {"A": "a", "B": "a"}, space="three_way", budget=1000
    )
    pol = make_policy("ucb1")
    run = run_loop(wf, pol, SimTestbed(world=no_contention, noise_sigma=0.0), rounds=8, repeats=1)
    assert len(pol.arms) == 8
    assert {"A": G, "B": G} not in pol.arms
    assert len({mapping_key(wf, r.mapping) for r in run.rounds}) == 8


def test_exploration_order_comes_from_the_seed(make_workflow, no_contention):
    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    tb = SimTestbed(world=no_contention, noise_sigma=0.0)
    first = {
        seed: [
            mapping_key(wf, r.mapping)
            for r in run_loop(wf, make_policy("ucb1"), tb, rounds=4, repeats=1, seed=seed).rounds
        ]
        for seed in range(6)
    }
    assert len({tuple(v) for v in first.values()}) > 1  # different seeds, different orders
    again = [
        mapping_key(wf, r.mapping) for r in run_loop(wf, make_policy("ucb1"), tb, rounds=4, repeats=1, seed=2).rounds
    ]
    assert again == first[2]  # same seed, same order


def test_bad_exploration_option():
    with pytest.raises(PolicyError, match=r"^policy ucb1: exploration must be a finite number >= 0, got -1$"):
        make_policy("ucb1", exploration=-1)


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), True])
def test_bad_exploration_value(value):
    with pytest.raises(PolicyError, match=r"^policy ucb1: exploration must be a finite number >= 0, got "):
        make_policy("ucb1", exploration=value)


def test_arm_cap_refuses_a_large_workflow_before_enumerating(make_workflow, make_context, monkeypatch):
    from agentsched.policies import ucb1

    def no_enumeration(wf):
        raise AssertionError("mappings enumerated before the arm count was checked")

    monkeypatch.setattr(ucb1, "enumerate_mappings", no_enumeration)
    tasks = {f"T{i:02d}": "a" for i in range(16)}
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}}, tasks, space="three_way", name="wide")
    with pytest.raises(PolicyError) as e:
        make_policy("ucb1").reset(make_context(wf))
    assert str(e.value) == (
        "policy ucb1: wide has 43046721 mappings (3^16), over the arm cap of 4096; "
        "use a policy that does not enumerate mappings"
    )


def test_arm_cap_is_in_the_preflight(make_workflow):
    """Checked before any run (a bench skips ucb1 on that workflow before its oracle is searched)."""
    tasks = {f"T{i}": "a" for i in range(8)}
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}}, tasks, space="three_way", name="eight")
    with pytest.raises(PolicyError, match=r"^policy ucb1: eight has 6561 mappings \(3\^8\), over the arm cap of 4096;"):
        make_policy("ucb1").preflight(wf)


def test_arm_cap_admits_exactly_max_arms(make_workflow, make_context):
    from agentsched.policies.ucb1 import MAX_ARMS

    tasks = {f"T{i:02d}": "a" for i in range(12)}  # 2^12 = 4096 = the cap
    wf = make_workflow({"a": {"cpu_ms": 100, "gpu_ms": 10}}, tasks)
    pol = make_policy("ucb1")
    pol.reset(make_context(wf))
    assert len(pol.arms) == MAX_ARMS == 4096


def test_run_ucb1_over_the_arm_cap_is_one_line(cli, tmp_path):
    import yaml

    big = tmp_path / "big.yaml"
    big.write_text(
        yaml.safe_dump(
            {
                "name": "big",
                "cards": "a5500",
                "decision_space": "three_way",
                "edges": [],
                "tasks": {f"T{i:02d}": "groupby" for i in range(16)},
            }
        )
    )
    code, out, err = cli("run", str(big), "-p", "ucb1", "--rounds", "1", "--repeats", "1", "--no-oracle")
    assert code != 0
    assert err.splitlines() == [
        "error: policy ucb1: big has 43046721 mappings (3^16), over the arm cap of 4096; "
        "use a policy that does not enumerate mappings"
    ]


def test_ucb1_refusal_on_thousands_of_tasks_is_a_short_line(cli, tmp_path):
    import yaml

    big = tmp_path / "big.yaml"
    big.write_text(
        yaml.safe_dump(
            {
                "name": "big",
                "cards": "a5500",
                "decision_space": "binary",
                "edges": [],
                "tasks": {f"T{i}": "groupby" for i in range(3000)},
            }
        )
    )
    code, out, err = cli("run", str(big), "-p", "ucb1", "--rounds", "1", "--repeats", "1", "--no-oracle")
    assert code != 0
    assert err.splitlines() == [
        "error: policy ucb1: big has about 10^903 mappings (2^3000), over the arm cap of "
        "4096; use a policy that does not enumerate mappings"
    ]


def test_a_round_with_nothing_to_judge_is_no_pull(make_workflow, no_contention):
    from tests.support.host_down import HostDown

    wf = make_workflow(CARDS, {"A": "a", "B": "b"})
    pol = make_policy("ucb1")
    tb = HostDown(SimTestbed(world=no_contention, noise_sigma=0.0), failing=1)  # round 0 fails in host code
    run = run_loop(wf, pol, tb, rounds=5, repeats=1, seed=3)
    keys = [mapping_key(wf, r.mapping) for r in run.rounds]
    assert [r.judged for r in run.rounds] == [False, True, True, True, True]
    assert keys[0] == keys[1]  # the arm is offered again, and the round judges it
    assert len(set(keys[1:])) == 4 and sum(pol.plays) == 4  # then every arm once, each a pull
    assert sorted(pol.reward_sum) == [0.1, 0.1, 0.1, 1.0]
