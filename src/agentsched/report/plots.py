"""Bench plots as PNG: E2E normalised to the oracle (the paper's Figure 5 layout), convergence
curves, and a Gantt chart of all-GPU vs the oracle. matplotlib is imported lazily (Agg)."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from agentsched.experiments.bench_records import BenchResult
from agentsched.report import style
from agentsched.report.gantt import save_gantt

E2E_FIGURE = "e2e_normalised.png"
CONVERGENCE_FIGURE = "convergence.png"
OOM_CAP = 20.0  # the row where OOM rounds are drawn on the convergence panels' log axis
OOM_MARK_Y = 0.9  # bars start here (below 1.0); a never-feasible policy's X marker sits on it


# the convergence panels' shared y scale: E2E over the oracle in percent, symlog (linear within
# +-LINEAR_PCT, where the near-oracle rounds are, logarithmic above), the same ticks on every panel
EXCESS_TICKS_PCT = (0, 2, 25, 100, 400)
LINEAR_PCT = 2.0
OOM_ROW_PCT = 1500.0  # where rounds with most seeds infeasible are marked


def plot_e2e_normalised(result: BenchResult, path: Path) -> Path:
    """Grouped bars: per scenario, each policy's best-round E2E / oracle (mean over seeds, min-max);
    a policy that was never feasible gets an OOM marker at the bottom, not a bar."""
    plt = style.plt()
    scen = list(result.workflows)
    pols = list(result.config.policies)
    colors = style.policy_colors(len(pols))  # the convergence plot's colours (style.policy_style)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(scen) + 2), 4.4))
    width = 0.8 / max(1, len(pols))
    oom_seen = False
    tallest = 1.0
    for j, p in enumerate(pols):
        for i, s in enumerate(scen):
            ratios = [r.metrics.best_ratio for r in result.records if r.scenario == s and r.policy == p]
            if not ratios:
                continue
            x = i - 0.4 + width * (j + 0.5)
            ok = [v for v in ratios if v is not None]
            if not ok:  # never feasible: a symbol where the bar would start, never a (tallest) bar
                ax.plot(
                    [x],
                    [OOM_MARK_Y * 1.04],
                    marker="X",
                    markersize=8,
                    color=colors[j],
                    markeredgecolor="black",
                    markeredgewidth=0.6,
                    linestyle="none",
                    zorder=5,
                )
                ax.text(x, OOM_MARK_Y * 1.1, "OOM", ha="center", va="bottom", fontsize=6, rotation=90)
                oom_seen = True
                continue
            mean = sum(ok) / len(ok)
            tallest = max(tallest, max(ok))
            ax.bar(x, mean - OOM_MARK_Y, width, bottom=OOM_MARK_Y, color=colors[j])
            if len(ok) > 1 and max(ok) > min(ok):
                ax.errorbar(
                    x,
                    mean,
                    yerr=[[mean - min(ok)], [max(ok) - mean]],
                    fmt="none",
                    ecolor="black",
                    elinewidth=0.6,
                    capsize=1.5,
                )
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[j]) for j in range(len(pols))]
    labels = [style.safe_label(p) for p in pols]
    if oom_seen:
        handles.append(plt.Line2D([], [], marker="X", color="grey", markeredgecolor="black", linestyle="none"))
        labels.append("never feasible (OOM)")
    ax.legend(handles, labels, fontsize=7, ncol=min(len(labels), 5), loc="upper left")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    top = max(2.0, tallest * 1.6)
    ax.set_ylim(OOM_MARK_Y * 0.97, top)
    from matplotlib.ticker import NullLocator

    ticks = [t for t in (1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100) if t < top]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xticks(range(len(scen)))
    ax.set_xticklabels([style.safe_label(s) for s in scen])
    ax.set_xlabel("scenario")
    ax.set_ylabel("E2E / oracle (best round)")
    ax.set_title("E2E normalised to the oracle (mean over seeds; bars: min-max; X: never feasible)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _excess_axis(ax) -> None:  # noqa: ANN001 - a matplotlib Axes
    """The shared symlog scale of the convergence panels, with plain tick labels and an OOM row."""
    from matplotlib.ticker import NullLocator

    ax.set_yscale("symlog", linthresh=LINEAR_PCT, linscale=1.0)
    ax.set_ylim(-LINEAR_PCT * 1.5, OOM_ROW_PCT * 1.6)
    ticks = list(EXCESS_TICKS_PCT) + [OOM_ROW_PCT]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"+{t:g}%" if t else "0" for t in EXCESS_TICKS_PCT] + ["OOM"])
    ax.yaxis.set_minor_locator(NullLocator())


def plot_convergence(result: BenchResult, path: Path) -> Path:
    """Small multiples, one panel per scenario on one shared scale: each round's measured E2E over
    the oracle's (percent, median over seeds) per policy. Each policy has its own colour, dash and
    marker; steady lines are drawn above erratic ones (an exploring bandit) so that lines lying on
    the oracle stay visible; every panel has its tick labels and an x label."""
    plt = style.plt()
    scen = list(result.workflows)
    pols = list(result.config.policies)
    cols = min(4, len(scen))
    rows = math.ceil(len(scen) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False, sharey=True)
    handles: dict[str, object] = {}
    for k, s in enumerate(scen):
        ax = axes[k // cols][k % cols]
        oracle = result.views[s].e2e_ms
        lines = []
        for j, p in enumerate(pols):
            recs = [r for r in result.records if r.scenario == s and r.policy == p]
            if not recs:
                continue
            n = min(len(r.run.records) for r in recs)
            ys, oom_x = [], []
            for i in range(n):
                vals = [r.run.records[i].result.e2e_ms for r in recs]
                ok = [v for v in vals if v is not None]
                if len(ok) * 2 > len(vals):  # most seeds feasible: plot their median
                    ys.append(min((statistics.median(ok) / oracle - 1.0) * 100.0, OOM_ROW_PCT * 0.8))
                else:
                    ys.append(float("nan"))
                    oom_x.append(i)
            finite = [y for y in ys if y == y]
            spread = (max(finite) - min(finite)) if finite else 0.0
            lines.append((spread, j, p, n, ys, oom_x))
        # erratic lines first (below, thinner, translucent), steady ones last (on top)
        for rank, (spread, j, p, n, ys, oom_x) in enumerate(sorted(lines, key=lambda x: (-x[0], x[1]))):
            st = style.policy_style(j, len(pols))
            st["zorder"] = 2 + rank
            if spread > 10.0:
                st.update(linewidth=1.0, alpha=0.6)
            (line,) = ax.plot(range(n), ys, label=style.safe_label(p), markevery=max(1, n // 6), **st)
            handles.setdefault(p, line)
            if oom_x:
                ax.plot(
                    oom_x,
                    [OOM_ROW_PCT] * len(oom_x),
                    color=st["color"],
                    marker="x",
                    linestyle="none",
                    markersize=5,
                    zorder=st["zorder"],
                )
        ax.axhline(0.0, color="black", linewidth=0.6, linestyle="--", zorder=1)
        _excess_axis(ax)
        ax.yaxis.set_tick_params(labelleft=True)
        ax.set_title(style.safe_label(s), fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("round", fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("E2E over oracle", fontsize=8)
    for k in range(len(scen), rows * cols):
        axes[k // cols][k % cols].axis("off")
    ordered = [p for p in pols if p in handles]
    fig.legend(
        [handles[p] for p in ordered],
        [style.safe_label(p) for p in ordered],
        loc="lower center",
        ncol=min(len(ordered), 6),
        fontsize=7,
        handlelength=3.5,
    )
    fig.suptitle(
        "Convergence: measured round E2E over the oracle's (median over seeds; symlog: linear within "
        f"+-{LINEAR_PCT:g}%; OOM row: most seeds infeasible)",
        fontsize=9,
    )
    legend_rows = math.ceil(len(ordered) / 6)
    fig.tight_layout(rect=(0, 0.035 * legend_rows + 0.02, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_gantt(result: BenchResult, scenario: str, path: Path) -> Path:
    """Noise-free timelines of the all-GPU mapping and the oracle's on one scenario (computed by the bench)."""
    return save_gantt(result.workflows[scenario], list(result.gantt), path)


def write_plots(result: BenchResult, out: Path) -> list[Path]:
    """Every plot into ``out``; the Gantt chart only when its scenario ran."""
    paths = [plot_e2e_normalised(result, out / E2E_FIGURE), plot_convergence(result, out / CONVERGENCE_FIGURE)]
    g = result.config.gantt_scenario
    if g in result.workflows and result.gantt:
        paths.append(plot_gantt(result, g, out / gantt_name(g)))
    return paths


def gantt_name(scenario: str) -> str:
    """The Gantt chart's file name for ``scenario``."""
    return f"gantt_{file_stem(scenario)}_all_gpu_vs_oracle.png"


def file_stem(name: str) -> str:
    """A workflow name as part of a file name inside the output folder: each run of characters other
    than letters, digits, '-' and '_' becomes one '_'. Why: names are free text, and one of
    ``../../x`` wrote its chart outside ``--out``."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "workflow"
