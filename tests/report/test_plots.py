"""report/plots.py: every policy of a bench keeps one colour of its own in e2e_normalised.png and
convergence.png (read from the figures' artists, not their pixels)."""

from __future__ import annotations

import math

import pytest
from matplotlib.colors import to_hex

from agentsched.report import plots


def _bar_colour_per_policy(ax, policies) -> dict[str, set[str]]:  # noqa: ANN001 - a matplotlib Axes
    """Policy -> the colours of its bars: scenario i's group spans i-0.4 to i+0.4, one slot per policy."""
    out: dict[str, set[str]] = {p: set() for p in policies}
    for bar in ax.patches:
        x = bar.get_x() + bar.get_width() / 2
        j = math.floor((x - round(x) + 0.4) / bar.get_width())
        out[policies[j]].add(to_hex(bar.get_facecolor()))
    return out


def test_every_policy_has_its_own_colour_the_same_in_both_plots(generated_bench, tmp_path, saved_figures):
    policies = list(generated_bench.config.policies)
    assert len(policies) == 11  # more than the ten colours of matplotlib's cycle
    plots.plot_e2e_normalised(generated_bench, tmp_path / "e.png")
    ax = saved_figures[-1].axes[0]
    bars = _bar_colour_per_policy(ax, policies)
    assert all(len(c) == 1 for c in bars.values()), bars  # every policy drew bars, all of one colour
    e2e = {p: c.pop() for p, c in bars.items()}
    assert len(set(e2e.values())) == len(policies), e2e
    legend = ax.get_legend()
    assert {
        t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles, strict=False)
    } == e2e

    plots.plot_convergence(generated_bench, tmp_path / "c.png")
    for panel in saved_figures[-1].axes:
        if panel.axison:
            lines = {
                line.get_label(): to_hex(line.get_color()) for line in panel.get_lines() if line.get_label() in e2e
            }
            assert lines == e2e  # the colour each policy has in e2e_normalised.png


@pytest.mark.parametrize(
    "name, stem",
    [
        ("S5", "S5"),
        ("../../../escape2/evil", "escape2_evil"),
        ("my flow v2.1", "my_flow_v2_1"),
        ("...", "workflow"),
        ("任务", "workflow"),
    ],
)
def test_a_workflow_name_in_a_file_name_stays_inside_the_folder(name, stem):
    """(A name of ../../x wrote the bench's Gantt chart outside --out.)"""
    assert plots.file_stem(name) == stem
