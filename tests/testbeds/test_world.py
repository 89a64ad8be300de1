"""The simulated world: built-in, files, perturbed:SEED, bad input as one-line errors, and the
cards that may no longer carry contention."""

from __future__ import annotations

import json
import math
import re

import pytest

from agentsched.errors import CardError, WorldError
from agentsched.model.cards import ToolCard, load_card_set
from agentsched.testbeds.world import (
    DEFAULT_WORLD,
    PERTURB_MAX_FACTOR,
    World,
    builtin_worlds,
    choose_world,
    load_world,
    perturbed,
)

A5500_FITTED = {"bert_base", "resnet50", "clip", "whisper_base", "ocr", "groupby", "image_resize", "vector_search"}


def test_the_calibrated_a5500_world_is_built_in_and_the_default():
    w = load_world()
    assert w.name == DEFAULT_WORLD == "a5500" and "a5500" in builtin_worlds() and load_world("a5500") is w
    assert set(w.contention) == A5500_FITTED
    assert (w.contention["clip"].sensitivity, w.contention["clip"].pressure) == (0.336, 2.929)
    assert (w.default.sensitivity, w.default.pressure) == (0.4, 0.3)


def test_parameters_own_entry_then_first_known_tag_then_default():
    w = load_world()
    cs = load_card_set("a5500")
    assert w.params(cs.resolve("clip")) == (0.336, 2.929)
    assert w.params(cs.resolve("clip", 12)) == (0.336, 2.929)  # an amplified tool is its base tool
    assert w.params(cs.resolve("sentiment")) == (0.3, 0.3)  # compute-bound
    assert w.params(ToolCard(name="n", cpu_ms=1, gpu_ms=1, vram_mb=1, tags=("x", "memory-bound", "compute-bound"))) == (
        0.75,
        0.45,
    )
    assert w.params(ToolCard(name="n", cpu_ms=1, gpu_ms=1, vram_mb=1, tags=("unknown",))) == (0.4, 0.3)


def test_the_cards_carry_no_contention_any_more():
    card = load_card_set("a5500").cards["clip"]
    assert not any("contention" in f for f in type(card).model_fields)
    assert not hasattr(card, "contention")


def test_a_world_file(tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(
        json.dumps(
            {
                "source": "test",
                "contention": {"clip": {"sensitivity": 1, "pressure": 2}},
                "default": {"sensitivity": 0, "pressure": 0},
            }
        )
    )
    w = load_world(str(f))
    assert w.name == "mine" and w.params(load_card_set("a5500").resolve("clip")) == (1.0, 2.0)
    assert w.params(load_card_set("a5500").resolve("resnet50")) == (0.0, 0.0)
    assert load_world(f) == w and load_world(w) is w


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{", "world file {f}: invalid JSON at line 1"),
        ("[]", "world 'bad': expected a JSON object"),
        ('{"contention": {}}', "world 'bad': default: Field required"),
        (
            '{"default": {"sensitivity": -1, "pressure": 0}}',
            "world 'bad': default.sensitivity: Input should be greater",
        ),
        ('{"default": {"sensitivity": 1e9, "pressure": 0}}', "world 'bad': default.sensitivity: Input should be less"),
        ('{"default": {"sensitivity": 1, "pressure": 0, "load": 3}}', "world 'bad': default.load: Extra inputs"),
        (
            '{"default": {"sensitivity": 1, "pressure": 0}, "contention": {"x": {"sensitivity": 1}}}',
            "world 'bad': contention.x.pressure: Field required",
        ),
    ],
)
def test_bad_world_files_are_one_line_errors(tmp_path, text, needle):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(WorldError) as e:
        load_world(str(f))
    msg = str(e.value)
    assert msg.startswith(needle.format(f=f)) and "\n" not in msg


@pytest.mark.parametrize(
    "ref, needle",
    [
        (
            "nowhere",
            "world 'nowhere' is neither a built-in world (a5500, a5500-heavy, a5500-max, a5500-power, "
            "a5500-saturating, a5500-threshold), perturbed:SEED[:BASE], understated:SEED[:BASE], drift:A,B,ROUND, "
            "nor a file",
        ),
        ("perturbed:", "world 'perturbed:': the seed after 'perturbed:' must be an integer"),
        ("perturbed:1.5", "world 'perturbed:1.5': the seed after 'perturbed:' must be an integer"),
    ],
)
def test_unknown_worlds_are_one_line_errors(ref, needle):
    with pytest.raises(WorldError, match="^" + re.escape(needle) + "$"):
        load_world(ref)


def test_perturbed_is_seeded_and_scales_each_parameter_within_one_third_to_three():
    base = load_world()
    w1, w1b, w2 = load_world("perturbed:1"), load_world("perturbed:1"), load_world("perturbed:2")
    assert w1 == w1b and w1 != w2 and w1.name == "perturbed:1"
    assert set(w1.contention) == set(base.contention) and set(w1.defaults_by_tag) == set(base.defaults_by_tag)
    pairs = [(base.contention[t], w1.contention[t]) for t in base.contention]
    pairs += [(base.defaults_by_tag[t], w1.defaults_by_tag[t]) for t in base.defaults_by_tag] + [
        (base.default, w1.default)
    ]
    factors = []
    for b, p in pairs:
        for field in ("sensitivity", "pressure"):
            x, y = getattr(b, field), getattr(p, field)
            if x == 0:
                assert y == 0  # no contention stays none (io-bound, bert_base's sensitivity)
                continue
            factors.append(y / x)
    assert all(1 / PERTURB_MAX_FACTOR - 1e-12 <= f <= PERTURB_MAX_FACTOR + 1e-12 for f in factors)
    assert len(set(factors)) == len(factors)  # independent draws
    logs = [math.log(f) for f in factors]
    assert min(logs) < 0 < max(logs)  # both directions occur over 30 draws


def test_perturbed_draw_order_is_sorted_tools_then_tags_then_default():
    base = World(
        name="b",
        contention={"z": {"sensitivity": 1, "pressure": 1}, "a": {"sensitivity": 1, "pressure": 1}},
        default={"sensitivity": 1, "pressure": 1},
    )
    swapped = World(
        name="b",
        contention={"a": {"sensitivity": 1, "pressure": 1}, "z": {"sensitivity": 1, "pressure": 1}},
        default={"sensitivity": 1, "pressure": 1},
    )
    assert perturbed(base, 5) == perturbed(swapped, 5)  # file order does not matter
    import random

    r = random.Random(5)
    first = 3 ** r.uniform(-1, 1)
    assert perturbed(base, 5).contention["a"].sensitivity == pytest.approx(first)


def test_choose_world_precedence():
    assert choose_world("perturbed:3", ["x.json"]) == "perturbed:3"  # --world wins
    assert choose_world(None, ["x.json", "x.json"]) == "x.json"  # the workflows' world: key
    assert choose_world(None, [None]) == choose_world(None, []) == "a5500"
    with pytest.raises(
        WorldError, match=r"^the workflows name different worlds \(x.json, a5500\): choose one with --world$"
    ):
        choose_world(None, ["x.json", None])


def test_a_card_file_with_contention_fields_says_to_move_them(tmp_path):
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"name": "old", "cards": {"clip": {"cpu_ms": 10, "gpu_ms": 1, "contention_pressure": 1}}}))
    with pytest.raises(CardError) as e:
        load_card_set(str(f))
    assert str(e.value) == (
        "card set 'old': tool 'clip' carries contention_pressure: GPU contention is not a card "
        "field any more (cards hold what a profiler measures); move it into a world file "
        "(see docs/simulator.md, 'The world')"
    )
    with pytest.raises(CardError, match="^tool card 'x' carries contention_sensitivity, contention_pressure: "):
        ToolCard(name="x", cpu_ms=1, contention_sensitivity=1, contention_pressure=1)
