"""A world's contention law, noise shape and base world: the built-in a5500-* worlds, perturbed
alternatives, and bad files as one-line errors."""

from __future__ import annotations

import json

import pytest

from agentsched import SimTestbed, load_scenario
from agentsched.errors import WorldError
from agentsched.model.workflow import Mode
from agentsched.testbeds.laws import LinearLaw, MaxLaw, PowerLaw, SaturatingLaw, ThresholdLaw
from agentsched.testbeds.noise import Noise
from agentsched.testbeds.world import builtin_worlds, load_world

ALTERNATIVES = {
    "a5500-max": MaxLaw(),
    "a5500-power": PowerLaw(gamma=1.5),
    "a5500-threshold": ThresholdLaw(threshold=0.5),
    "a5500-saturating": SaturatingLaw(scale=1.0),
}


def test_the_default_world_has_the_linear_law_and_log_normal_noise():
    w = load_world()
    assert w.law == LinearLaw() and w.noise == Noise() and w.noise.is_default


@pytest.mark.parametrize("name, law", ALTERNATIVES.items())
def test_the_alternative_law_worlds_are_a5500_with_another_law(name, law):
    w, a5500 = load_world(name), load_world("a5500")
    assert name in builtin_worlds() and w.name == name and w.law == law and w.noise == Noise()
    assert (w.contention, w.defaults_by_tag, w.default) == (a5500.contention, a5500.defaults_by_tag, a5500.default)


def test_the_heavy_noise_world_is_a5500_with_student_t_and_stragglers():
    w = load_world("a5500-heavy")
    assert w.law == LinearLaw() and w.contention == load_world("a5500").contention
    assert w.noise == Noise(kind="student_t", df=3, straggler_probability=0.02, straggler_factor=3)


def test_each_alternative_law_changes_a_contended_run():
    # S9 all on the GPU: three tools (CLIP, OCR, ResNet) contend; every law gives its own E2E
    wf = load_scenario("S9")
    m = {t: Mode.GPU_NOW for t in wf.task_ids}
    e2e = {name: SimTestbed(noise_sigma=0, world=name).run(wf, m).e2e_ms for name in ["a5500", *ALTERNATIVES]}
    assert len(set(e2e.values())) == len(e2e), e2e


def test_perturbed_alternatives_keep_the_law_and_take_the_same_factors():
    plain, alt = load_world("perturbed:3"), load_world("perturbed:3:a5500-power")
    assert alt.name == "perturbed:3:a5500-power" and plain.name == "perturbed:3"
    assert alt.law == PowerLaw(gamma=1.5) and plain.law == LinearLaw()
    assert (alt.contention, alt.default) == (plain.contention, plain.default)  # same base parameters, same draws
    assert load_world("perturbed:3:a5500-heavy").noise == load_world("a5500-heavy").noise


def test_a_law_may_be_named_without_parameters(tmp_path):
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"law": "max", "default": {"sensitivity": 1, "pressure": 1}}))
    assert load_world(str(f)).law == MaxLaw()


def test_a_world_extends_a_base_file_relative_to_itself(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.json").write_text(
        json.dumps(
            {
                "contention": {"clip": {"sensitivity": 1, "pressure": 2}},
                "default": {"sensitivity": 0.5, "pressure": 0.5},
                "law": {"kind": "threshold", "threshold": 0.2},
            }
        )
    )
    (tmp_path / "sub" / "top.json").write_text(
        json.dumps({"base": "base.json", "law": "max", "default": {"sensitivity": 0, "pressure": 0}})
    )
    w = load_world(str(tmp_path / "sub" / "top.json"))
    assert w.name == "top" and w.law == MaxLaw() and w.contention["clip"].pressure == 2
    assert (w.default.sensitivity, w.default.pressure) == (0, 0)  # its own keys win


def _doc(**extra):
    return json.dumps({"default": {"sensitivity": 1, "pressure": 1}, **extra})


@pytest.mark.parametrize(
    "text, needle",
    [
        (_doc(law="quadratic"), "world 'bad': law: Input tag 'quadratic' found using 'kind' does not match"),
        (_doc(law={"gamma": 2}), "world 'bad': law: Unable to extract tag using discriminator 'kind'"),
        (_doc(law=3), "world 'bad': law: Input should be a valid dictionary"),
        (_doc(law={"kind": "power"}), "world 'bad': law.power.gamma: Field required"),
        (_doc(law={"kind": "power", "gamma": 0}), "world 'bad': law.power.gamma: Input should be greater than 0"),
        (
            _doc(law={"kind": "power", "gamma": 5}),
            "world 'bad': law.power.gamma: Input should be less than or equal to 4",
        ),
        (
            _doc(law={"kind": "threshold", "threshold": -1}),
            "world 'bad': law.threshold.threshold: Input should be greater",
        ),
        (
            _doc(law={"kind": "saturating", "scale": 0}),
            "world 'bad': law.saturating.scale: Input should be greater than 0",
        ),
        (_doc(law={"kind": "max", "gamma": 2}), "world 'bad': law.max.gamma: Extra inputs are not permitted"),
        (_doc(noise={"kind": "cauchy"}), "world 'bad': noise.kind: Input should be 'lognormal' or 'student_t'"),
        (_doc(noise={"kind": "student_t"}), "world 'bad': noise: df is required with kind student_t, and only there"),
        (_doc(noise={"df": 3}), "world 'bad': noise: df is required with kind student_t, and only there"),
        (_doc(noise={"kind": "student_t", "df": 0}), "world 'bad': noise.df: Input should be greater than 0"),
        (
            _doc(noise={"straggler_probability": 1}),
            "world 'bad': noise.straggler_probability: Input should be less than 1",
        ),
        (_doc(noise={"straggler_factor": 0.5}), "world 'bad': noise.straggler_factor: Input should be greater"),
        (_doc(noise={"straggler_factor": 101}), "world 'bad': noise.straggler_factor: Input should be less"),
        (_doc(base=""), "world 'bad': base: must be a world name or a file path"),
        (_doc(base="nowhere"), "world '{d}/nowhere' is neither a built-in world"),
        (_doc(base="drift:a5500,a5500-max,2"), "world 'bad': base: cannot extend a drifting world"),
        (_doc(base="bad.json"), "world 'bad': base: more than 8 worlds deep (a cycle?)"),
    ],
)
def test_bad_laws_noise_and_bases_are_one_line_errors(tmp_path, text, needle):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(WorldError) as e:
        load_world(str(f))
    msg = str(e.value)
    assert msg.startswith(needle.format(d=tmp_path)) and "\n" not in msg, msg
