"""Issue 13 item 8: plots a reader can read. Convergence as small multiples on one shared scale with
distinct styles and an x label on every panel; OOM as a symbol in e2e_normalised; Gantt charts with
a legend for colours and hatching, axis labels and load labels; no glyph warnings for user text."""

from __future__ import annotations

import warnings

import pytest

from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.model import Workflow
from agentsched.model.cards import CardSet
from agentsched.report import plots, style
from agentsched.report.gantt import save_gantt
from agentsched.testbeds.sim import SimTestbed


@pytest.fixture(scope="module")
def result():
    return run_bench(
        BenchConfig(
            scenarios=("S2", "S5", "S13"),
            policies=("all-gpu", "heft", "ucb1", "agent-rules"),
            rounds=4,
            repeats=1,
            seeds=(0, 1),
            ablation=False,
        )
    )


def test_convergence_small_multiples_share_one_labelled_scale(result, tmp_path, saved_figures):
    plots.plot_convergence(result, tmp_path / "c.png")
    fig = saved_figures[-1]
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_title() for ax in panels] == ["S2", "S5", "S13"]
    assert all(ax.get_xlabel() == "round" for ax in panels)
    ticks = [[t.get_text() for t in ax.get_yticklabels()] for ax in panels]
    assert ticks[0] == ["0", "+2%", "+25%", "+100%", "+400%", "OOM"] and all(t == ticks[0] for t in ticks)
    styles = {
        (str(line.get_linestyle()), line.get_marker(), line.get_color())
        for line in panels[0].get_lines()
        if line.get_label() in result.config.policies
    }
    assert len(styles) == 4  # one distinct style per policy


def test_policy_styles_differ_in_dash_and_marker():
    pairs = {(str(style.policy_style(j, 8)["linestyle"]), style.policy_style(j, 8)["marker"]) for j in range(8)}
    assert len(pairs) == 8
    widths = [style.policy_style(j, 8)["linewidth"] for j in range(8)]
    assert widths == sorted(widths, reverse=True)


def test_e2e_normalised_marks_oom_with_a_symbol_not_a_bar(result, tmp_path, saved_figures):
    plots.plot_e2e_normalised(result, tmp_path / "e.png")
    ax = saved_figures[-1].axes[0]
    marks = [line for line in ax.get_lines() if line.get_marker() == "X"]
    assert len(marks) == 1  # all-gpu on S13 never fits the budget
    tops = [b.get_y() + b.get_height() for b in ax.patches if b.get_height() > 0]
    ratios = [r.metrics.best_ratio for r in result.records if r.metrics.best_ratio is not None]
    assert max(tops) == pytest.approx(max(sum(v for v in xs) / len(xs) for xs in _means(result)), rel=1e-9)
    assert max(tops) <= max(ratios) + 1e-9
    assert "never feasible (OOM)" in [t.get_text() for t in ax.get_legend().get_texts()]


def _means(result):
    out = []
    for s in result.workflows:
        for p in result.config.policies:
            xs = [r.metrics.best_ratio for r in result.records if r.scenario == s and r.policy == p]
            xs = [x for x in xs if x is not None]
            if xs:
                out.append(xs)
    return out


def test_gantt_has_legend_axis_labels_and_load_labels(tmp_path, saved_figures):
    from agentsched.model.mapping import parse_mapping
    from agentsched.scenarios import load_scenario

    wf = load_scenario("S13")
    ex = SimTestbed(noise_sigma=0.0, seed=None).expected(wf, parse_mapping(wf, "A=now,B=queue,C=now,D=cpu"))
    save_gantt(wf, [("oracle", ex)], tmp_path / "g.png")
    fig = saved_figures[-1]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        "cpu: on the CPU",
        "gpu_now: on the GPU at once",
        "gpu_queue: GPU queue, one at a time",
        "hatched: model load-in (gpu_queue admission)",
    ]
    lanes, vram = fig.axes[0], fig.axes[1]
    assert lanes.get_xlabel() == "time (ms)" and lanes.get_ylabel() == "task (mode)"
    assert vram.get_ylabel() == "VRAM MB" and vram.get_xlabel() == "time (ms)"
    texts = [t.get_text() for t in lanes.texts]
    assert any(t.startswith("load ") and t.endswith(" ms") for t in texts)
    assert "B bert_base_x12" in texts


def test_gantt_of_a_run_where_nothing_started(tmp_path, saved_figures):
    """An oom in the first instant starts no task: before, matplotlib refused the legend of 0 columns
    and `simulate --gantt` was an internal error."""
    from agentsched.model.mapping import parse_mapping
    from agentsched.scenarios import load_scenario

    wf = load_scenario("S13")
    ex = SimTestbed(noise_sigma=0.0, seed=None).expected(wf, parse_mapping(wf, "A=now,B=now,C=now,D=cpu"))
    assert ex.status.value == "oom" and not ex.spans
    save_gantt(wf, [("all-gpu", ex)], tmp_path / "oom.png")
    assert (tmp_path / "oom.png").stat().st_size > 0
    assert "no task started" in [t.get_text() for t in saved_figures[-1].axes[0].texts]


def test_user_text_the_font_lacks_draws_without_glyph_warnings(tmp_path):
    assert style.safe_label("plain A_1") == "plain A_1"
    assert style.safe_label("任务") == "\\u4efb\\u52a1"
    assert style.safe_label("cost $5 $x$") == "cost \\$5 \\$x\\$"
    cards = CardSet(name="cjk", cards={"图像": {"cpu_ms": 100, "gpu_ms": 10, "vram_mb": 100, "load_ms": 5}})
    wf = Workflow(name="工作流 $x$", tasks={"A": "图像"}, decision_space="three_way").with_cards(cards)
    ex = SimTestbed(noise_sigma=0.0, seed=None).expected(wf, {"A": wf.decision_space.modes[2]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph is a UserWarning: it would fail here
        save_gantt(wf, [("queue", ex)], tmp_path / "cjk.png")
    assert (tmp_path / "cjk.png").stat().st_size > 0
