"""The learning curve's figure (``report/history_plot.py``)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from agentsched.report.history_plot import learning_curve_figure, plot_learning_curve


def test_round_ticks_are_whole_numbers_for_a_short_curve() -> None:
    fig = learning_curve_figure({"agent-plan #1": [(0, 800.0), (1, 650.0)]}, "S13")
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticks() if -0.5 <= t <= 1.5]
    plt.close(fig)
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_failed_rounds_are_drawn_and_the_file_written(tmp_path) -> None:
    fig = learning_curve_figure({"a": [(0, None), (1, 700.0)]}, "S13")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    plt.close(fig)
    assert "a: failed round" in labels and "a: best so far" in labels
    out = plot_learning_curve({"a": [(0, 700.0)]}, tmp_path / "c.png", "S13")
    assert out.stat().st_size > 0
