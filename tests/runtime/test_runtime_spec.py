"""``Runtime(..., testbed=TestbedSpec(...))``: the spec carries every testbed's options, Ray's included
(a real local Ray instance, GPUs emulated; skipped only when ray is not installed)."""

from __future__ import annotations

import pytest

import agentsched
from agentsched.model.workflow import Mode
from agentsched.runtime import Runtime, workflow_from_tools
from agentsched.testbeds.spec import TestbedSpec


class Words(agentsched.Tool):
    """Splits its text into words (host code only)."""

    name = "words"
    has_gpu = False

    def run(self, inputs):
        return inputs["text"].split()


class Count(agentsched.Tool):
    """Counts its predecessor's words; has a GPU version (emulated on the Ray testbed here)."""

    name = "count"
    has_gpu = True

    def run(self, inputs):
        return len(inputs["A"])


@pytest.mark.ray
def test_runtime_takes_a_ray_spec_with_emulated_gpus():
    pytest.importorskip("ray")
    w = workflow_from_tools("words-spec", {"A": Words, "B": Count}, [("A", "B")], vram_budget_mb=500)
    spec = TestbedSpec(kind="ray", emulate_gpu=True, cpu_slots=2)
    with Runtime(w, store=None, testbed=spec, round_size=2) as rt:
        results = [rt.invoke(text="one two three") for _ in range(4)]
        assert rt.testbed.name == "ray" and rt.testbed.emulate_gpu  # the spec's options reached the testbed
        assert rt.testbed.cluster.cpu_slots == 2
        assert not rt.host_only  # the emulated GPU is a GPU to the policy
        assert rt.policy.label == "agent-plan-cold"  # the default where a tool has no card
    assert [r.status.value for r in results] == ["ok"] * 4, [r.message for r in results]
    assert all(r.outputs == {"B": 3} for r in results)


def test_runtime_takes_a_sim_spec_and_the_kind_name_shorthand():
    wf = agentsched.load_scenario("S5")
    with Runtime(wf, store=None, testbed=TestbedSpec(noise_sigma=0.0, world="perturbed:1"), round_size=2) as rt:
        assert rt.invoke().ok
        assert (rt.testbed.name, rt.testbed.noise_sigma, rt.testbed.world.name) == ("sim", 0.0, "perturbed:1")
        assert rt.policy.label == "agent-plan"  # cards for every task: the default policy, warm
    with Runtime(wf, store=None, testbed="sim", round_size=2) as rt:
        assert rt.invoke().ok and rt.testbed.noise_sigma == 0.03


def test_a_bad_spec_value_is_one_line_before_anything_runs():
    with pytest.raises(
        agentsched.AgentschedError, match=r"^emulate_gpu applies only to the ray testbed \(got local\)$"
    ):
        Runtime(agentsched.load_scenario("S5"), store=None, testbed=TestbedSpec(kind="local", emulate_gpu=True))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seed": "x"}, "seed must be an integer, got 'x'"),  # (accepted before)
        ({"seed": 1.5}, "seed must be an integer, got 1.5"),
        ({"store": 5}, "store must be a file path, a Store or None, got int"),  # (a bare TypeError before)
        ({"policy_options": [1]}, "policy_options must be a mapping of option names to values, got list"),
    ],
)
def test_an_argument_of_the_wrong_type_is_one_line_naming_it(kwargs, message, tmp_path):
    with pytest.raises(agentsched.AgentschedError) as e:
        Runtime(agentsched.load_scenario("S5"), testbed="sim", **{"store": None, **kwargs})
    assert str(e.value) == message


def test_a_mapping_pinned_as_text_is_the_cli_s_form():
    with Runtime(agentsched.load_scenario("S5"), store=None, testbed="sim") as rt:
        assert rt.pin("A=gpu,B=cpu,C=cpu,D=gpu") == {"A": Mode.GPU_NOW, "B": Mode.CPU, "C": Mode.CPU, "D": Mode.GPU_NOW}
        assert rt.invoke().mapping == rt.pinned
