"""The testbed spec: one validated object per testbed, built by the factory, written and read back."""

from __future__ import annotations

import pytest

from agentsched.errors import TestbedError, WorldError
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, TestbedKind, TestbedSpec, as_spec
from agentsched.testbeds.world import World, load_world


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kind": "cloud"}, "unknown testbed 'cloud' (valid: sim, local, ray)"),
        ({"seed": 1.5}, "testbed seed must be an integer, got 1.5"),
        ({"seed": True}, "testbed seed must be an integer, got True"),
        ({"noise_sigma": -0.1}, "noise_sigma must be a number in [0, 1], got -0.1"),
        ({"noise_sigma": float("nan")}, "noise_sigma must be a number in [0, 1], got nan"),
        ({"noise_sigma": 2}, "noise_sigma must be a number in [0, 1], got 2"),
        ({"size": "huge"}, "testbed size must be small or paper, got 'huge'"),
        ({"cpu_slots": 0}, "cpu_slots must be an integer >= 1, got 0"),
        ({"cpu_slots": 2.5}, "cpu_slots must be an integer >= 1, got 2.5"),
        ({"kind": "ray", "timeout_s": 0}, "timeout_s must be a finite number > 0, got 0"),
        ({"kind": "ray", "timeout_s": float("inf")}, "timeout_s must be a finite number > 0, got inf"),
        ({"kind": "ray", "emulate_gpu": "yes"}, "emulate_gpu must be true or false, got 'yes'"),
        ({"kind": "local", "noise_sigma": 0.1}, "noise_sigma applies only to the sim testbed (got local)"),
        ({"kind": "ray", "world": "a5500"}, "world applies only to the sim testbed (got ray)"),
        ({"ray_address": "auto"}, "ray_address applies only to the ray testbed (got sim)"),
        ({"kind": "local", "emulate_gpu": True}, "emulate_gpu applies only to the ray testbed (got local)"),
        ({"timeout_s": 5.0}, "timeout_s applies only to the local and ray testbeds (got sim)"),
        ({"size": "paper"}, "size applies only to the local and ray testbeds (got sim)"),  # (it was ignored)
    ],
)
def test_each_invalid_argument_is_a_one_line_testbed_error(kwargs, message):
    with pytest.raises(TestbedError) as e:
        TestbedSpec(**kwargs)
    assert str(e.value) == message


def test_an_unknown_world_is_a_one_line_world_error():
    with pytest.raises(WorldError, match=r"^world 'mars' is neither a built-in world"):
        TestbedSpec(world="mars")


def test_the_default_is_the_calibrated_simulator_with_concrete_values():
    spec = TestbedSpec()
    assert spec.kind is TestbedKind.SIM and spec.noise_sigma == DEFAULT_NOISE_SIGMA == 0.03
    assert isinstance(spec.world, World) and spec.world.name == "a5500"
    assert spec == TestbedSpec(kind="sim", noise_sigma=0.03, world=load_world("a5500"))  # one simulator, one spec
    tb = spec.build()
    assert isinstance(tb, SimTestbed) and tb.noise_sigma == 0.03 and tb.world.name == "a5500"


def test_the_spec_reaches_the_simulator():
    tb = TestbedSpec(noise_sigma=0.0, cpu_slots=2, world="perturbed:4").build()
    assert (tb.noise_sigma, tb.cpu_slots, tb.world.name, tb.deterministic) == (0.0, 2, "perturbed:4", True)


@pytest.mark.parametrize(
    "spec",
    [
        TestbedSpec(),
        TestbedSpec(seed=7, noise_sigma=0.0, cpu_slots=3, world="perturbed:2"),
        TestbedSpec(kind="local", size="paper", cpu_slots=2, seed=1),
        TestbedSpec(kind="ray", ray_address="auto", emulate_gpu=True, cpu_slots=4, timeout_s=30.0),
    ],
)
def test_to_dict_and_from_dict_round_trip(spec):
    doc = spec.to_dict()
    assert set(doc) == {
        "name",
        "seed",
        "noise_sigma",
        "size",
        "cpu_slots",
        "world",
        "ray_address",
        "emulate_gpu",
        "timeout_s",
    }
    assert TestbedSpec.from_dict(doc) == spec
    assert TestbedSpec.from_dict(doc).to_dict() == doc


def test_from_dict_refuses_an_unknown_field():
    with pytest.raises(TestbedError, match=r"^unknown testbed spec field\(s\) noise \(valid: name, "):
        TestbedSpec.from_dict({"name": "sim", "noise": 0.1})


def test_a_kind_name_is_the_shorthand_for_its_default_spec():
    assert as_spec("sim") == TestbedSpec() == as_spec(None)
    assert as_spec(TestbedKind.LOCAL) == TestbedSpec(kind="local")
    spec = TestbedSpec(kind="ray", emulate_gpu=True)
    assert as_spec(spec) is spec


def test_replace_validates_again():
    spec = TestbedSpec(kind="local", cpu_slots=2)
    assert spec.replace(seed=3).seed == 3
    with pytest.raises(TestbedError, match="cpu_slots must be an integer >= 1, got 0"):
        spec.replace(cpu_slots=0)
