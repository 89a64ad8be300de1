"""A drifting world: drift:A,B,ROUND parses into a DriftWorld, the sim testbed switches at exactly
ROUND when the run loop begins it, and each side is the pure world run for run."""

from __future__ import annotations

import pytest

from agentsched import SimTestbed, load_scenario
from agentsched.errors import TestbedError, WorldError
from agentsched.loop import run_loop
from agentsched.policies.all_gpu import AllGpuPolicy
from agentsched.testbeds.world import DriftWorld, drift_world, load_world

DRIFT = "drift:a5500,a5500-max,3"


def test_drift_parses_into_a_drift_world():
    w = load_world(DRIFT)
    assert isinstance(w, DriftWorld) and w.name == DRIFT and w.switch_round == 3
    assert (w.before, w.after) == (load_world("a5500"), load_world("a5500-max"))
    assert [w.at_round(i).name for i in range(5)] == ["a5500"] * 3 + ["a5500-max"] * 2
    assert w.contention == w.before.contention and w.law == w.before.law  # acts as round 0's world
    assert load_world("drift:perturbed:1:a5500-power, a5500 ,0").at_round(0).name == "a5500"


def test_drift_worlds_chain_programmatically():
    a, b, c = load_world("a5500"), load_world("a5500-max"), load_world("a5500-power")
    w = drift_world(drift_world(a, b, 2), c, 4)
    assert [w.at_round(i).name for i in range(6)] == [
        "a5500",
        "a5500",
        "a5500-max",
        "a5500-max",
        "a5500-power",
        "a5500-power",
    ]
    with pytest.raises(WorldError, match=r"^drift: the switch round must be an integer >= 0, got -1$"):
        drift_world(a, b, -1)


@pytest.mark.parametrize(
    "ref, needle",
    [
        ("drift:a5500", "expected drift:A,B,ROUND (two worlds without commas, a round)"),
        ("drift:a5500,a5500-max", "expected drift:A,B,ROUND"),
        ("drift:a5500,,3", "expected drift:A,B,ROUND"),
        ("drift:a,b,c,4", "expected drift:A,B,ROUND"),
        ("drift:a5500,a5500-max,x", "the round after the second comma must be an integer"),
        ("drift:a5500,a5500-max,-2", "the switch round must be >= 0"),
    ],
)
def test_bad_drifts_are_one_line_errors(ref, needle):
    with pytest.raises(WorldError) as e:
        load_world(ref)
    assert str(e.value).startswith(f"world '{ref}': {needle}") and "\n" not in str(e.value)


def test_a_drift_side_must_exist_and_a_drift_cannot_be_perturbed():
    with pytest.raises(WorldError, match="^world 'nowhere' is neither a built-in world"):
        load_world("drift:a5500,nowhere,2")
    with pytest.raises(WorldError, match="cannot perturb a drifting world"):
        load_world("perturbed:1:drift:a5500,a5500-max,2")


def test_the_testbed_switches_worlds_at_begin_round():
    tb = SimTestbed(world=DRIFT)
    assert tb.world.name == DRIFT and tb.current_world.name == "a5500"  # before any round: round 0's
    tb.begin_round(3)
    assert tb.current_world.name == "a5500-max"
    tb.begin_round(0)  # a new run of the loop starts over
    assert tb.current_world.name == "a5500"
    for bad in (-1, 1.5, True):
        with pytest.raises(TestbedError, match="^round index must be an integer >= 0, got "):
            tb.begin_round(bad)


def test_begin_round_is_a_no_op_in_a_world_that_does_not_drift():
    tb = SimTestbed()
    tb.begin_round(7)
    assert tb.current_world is tb.world


def _per_round_e2e(world: str, rounds: int = 6) -> list[float | None]:
    wf = load_scenario("S9")  # all-GPU S9: three contending GPU tools, a5500 and max disagree
    run = run_loop(wf, AllGpuPolicy(), SimTestbed(world=world), rounds=rounds, repeats=3, seed=4)
    return [r.e2e_ms for r in run.rounds]


def test_a_drift_run_is_pure_a_before_the_switch_and_pure_b_from_it():
    drift, a, b = _per_round_e2e(DRIFT), _per_round_e2e("a5500"), _per_round_e2e("a5500-max")
    assert None not in drift
    assert drift[:3] == a[:3] and drift[3:] == b[3:]  # same seed, same draws: bit for bit
    assert all(x != y for x, y in zip(a, b, strict=False))  # the two worlds really differ on this run


def test_a_testbed_reused_after_a_drift_run_starts_again_in_world_a():
    wf = load_scenario("S9")
    tb = SimTestbed(world=DRIFT)
    run_loop(wf, AllGpuPolicy(), tb, rounds=5, repeats=1, seed=0)
    assert tb.current_world.name == "a5500-max"
    again = run_loop(wf, AllGpuPolicy(), tb, rounds=6, repeats=3, seed=4)
    assert [r.e2e_ms for r in again.rounds] == _per_round_e2e(DRIFT)
