"""The load-aware planner's online contention learner: what it keeps and what it takes back."""

from __future__ import annotations

import math

import pytest

from agentsched.model.workflow import Mode
from agentsched.planner.prior import contention_prior
from agentsched.planner.traffic_learn import ContentionLearner, MeasuredRatio
from agentsched.scenarios import load_scenario

S7 = load_scenario("S7")
OCR, CLIP = S7.task_cards["A"], S7.task_cards["B"]  # ocr_x2, clip_x12


def _learned_beside_clip(runs: int) -> ContentionLearner:
    learner = ContentionLearner()
    learner.params(CLIP)
    for _ in range(runs):  # ran 3x its card time beside clip for its whole run
        learner.observe(OCR, Mode.GPU_NOW, 3 * OCR.gpu_ms, {"clip": 3 * OCR.gpu_ms})
    return learner


def test_learned_holds_each_unit_with_its_runs_and_only_units_learned_from():
    learned = _learned_beside_clip(5).learned()
    assert set(learned) == {"ocr"}  # clip pressed but was never a run learned from
    s, p, runs = learned["ocr"]
    assert runs == 5 and s > contention_prior(OCR.tags)[0]


def test_restore_starts_a_unit_where_another_learner_left_it():
    old = _learned_beside_clip(20)
    new = ContentionLearner()
    s, p, runs = old.learned()["ocr"]
    new.restore("ocr", s, p, runs)
    assert new.params(OCR) == pytest.approx(old.params(OCR)) and new.unit_runs == {"ocr": 20}
    assert new.params(CLIP) == pytest.approx(contention_prior(CLIP.tags))  # not restored: its prior
    new.observe(OCR, Mode.GPU_NOW, 3 * OCR.gpu_ms, {"clip": 3 * OCR.gpu_ms})
    assert new.learned()["ocr"][2] == 21


@pytest.mark.parametrize(
    "s, p, runs, message",
    [
        (math.nan, 1.0, 3, "learned s of ocr"),
        (0.0, 1.0, 3, "learned s of ocr"),
        (-1.0, 1.0, 3, "learned s of ocr"),
        (1.0, 2e3, 3, "learned p of ocr"),
        (1.0, "x", 3, "learned p of ocr"),
        (1.0, 1.0, -1, "runs learned for ocr"),
        (1.0, 1.0, 2.5, "runs learned for ocr"),
    ],
)
def test_restore_refuses_a_value_outside_the_learners_bounds(s, p, runs, message):
    learner = ContentionLearner()
    with pytest.raises(ValueError, match=message):
        learner.restore("ocr", s, p, runs)
    assert learner.learned() == {} and learner.params(OCR) == pytest.approx(contention_prior(OCR.tags))


def test_the_measured_ratio_moves_toward_what_the_runs_took():
    m = MeasuredRatio()
    assert m.factor(OCR) == 1.0  # nothing measured yet: the model's word
    for i in range(200):
        m.started(i, "A", OCR, 100.0)
        m.observe(i, "A", Mode.GPU_NOW, 300.0)  # every run took 3x its prediction
    assert m.factor(OCR) == pytest.approx(3.0, rel=0.01)
    assert m.factor(load_scenario("S1").task_cards["A"]) == 1.0  # another tool: untouched
    ocr_x4 = OCR.model_copy(update={"name": "ocr_x4"})
    assert m.factor(ocr_x4) == m.factor(OCR)  # one unit tool, whatever the repeat


def test_the_measured_ratio_takes_only_gpu_now_runs_it_predicted_and_stays_bounded():
    m = MeasuredRatio()
    m.observe(1, "A", Mode.GPU_NOW, 500.0)  # never predicted (placed elsewhere)
    m.started(2, "A", OCR, 100.0)
    m.observe(2, "A", Mode.CPU, 5000.0)  # moved off the GPU before it ran there: not a GPU run
    assert m.factor(OCR) == 1.0
    for i in range(3, 2000):
        m.started(i, "A", OCR, 1.0)
        m.observe(i, "A", Mode.GPU_NOW, 1e6)
    assert m.factor(OCR) == pytest.approx(math.exp(MeasuredRatio.MAX_LOG))


def test_predictions_waiting_for_their_runs_are_bounded(monkeypatch):
    monkeypatch.setattr(MeasuredRatio, "MAX_PENDING", 3)
    m = MeasuredRatio()
    for i in range(5):
        m.started(i, "A", OCR, 100.0)
    m.observe(0, "A", Mode.GPU_NOW, 300.0)  # the oldest was dropped: nothing learned from it
    assert m.factor(OCR) == 1.0
    m.observe(4, "A", Mode.GPU_NOW, 300.0)
    assert m.factor(OCR) > 1.0
