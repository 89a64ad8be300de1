"""Bench plots as PNG: E2E normalised to the oracle (the paper's Figure 5 layout), convergence
curves, and a Gantt chart of all-GPU vs the oracle. matplotlib is imported lazily (Agg)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from agentsched.experiments.bench import BenchResult
from agentsched.report.gantt import save_gantt

E2E_FIGURE = "e2e_normalised.png"
CONVERGENCE_FIGURE = "convergence.png"
OOM_CAP = 20.0  # where never-feasible bars / OOM rounds are drawn on the log axis


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_e2e_normalised(result: BenchResult, path: Path) -> Path:
    """Grouped bars: per scenario, each policy's best-round E2E / oracle (mean over seeds, min-max)."""
    plt = _plt()
    scen = list(result.workflows)
    pols = list(result.config.policies)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(scen) + 2), 4.2))
    width = 0.8 / max(1, len(pols))
    for j, p in enumerate(pols):
        for i, s in enumerate(scen):
            ratios = [r.metrics.best_ratio for r in result.records if r.scenario == s and r.policy == p]
            if not ratios:
                continue
            x = i - 0.4 + width * (j + 0.5)
            ok = [v for v in ratios if v is not None]
            if not ok:
                ax.bar(x, OOM_CAP, width, color=f"C{j}", alpha=0.25, hatch="xx", edgecolor=f"C{j}")
                ax.text(x, OOM_CAP * 1.05, "OOM", ha="center", va="bottom", fontsize=6, rotation=90)
                continue
            mean = sum(ok) / len(ok)
            ax.bar(x, mean, width, color=f"C{j}")
            if len(ok) > 1 and max(ok) > min(ok):
                ax.errorbar(x, mean, yerr=[[mean - min(ok)], [max(ok) - mean]], fmt="none", ecolor="black",
                            elinewidth=0.6, capsize=1.5)
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{j}") for j in range(len(pols))]
    ax.legend(handles, pols, fontsize=7, ncol=min(len(pols), 5), loc="upper left")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(scen)))
    ax.set_xticklabels(scen)
    ax.set_ylabel("E2E / oracle (best round)")
    ax.set_title("E2E normalised to the oracle (mean over seeds; bars: min-max; hatched: never feasible)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_convergence(result: BenchResult, path: Path) -> Path:
    """One panel per scenario: each round's measured E2E / oracle, median over seeds, per policy."""
    plt = _plt()
    scen = list(result.workflows)
    pols = list(result.config.policies)
    cols = min(4, len(scen))
    rows = math.ceil(len(scen) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for k, s in enumerate(scen):
        ax = axes[k // cols][k % cols]
        oracle = result.views[s].e2e_ms
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
                    ys.append(statistics.median(ok) / oracle)
                else:
                    ys.append(float("nan"))
                    oom_x.append(i)
            ax.plot(range(n), ys, color=f"C{j}", linewidth=1.1, marker=".", markersize=3, label=p)
            if oom_x:
                ax.plot(oom_x, [OOM_CAP] * len(oom_x), color=f"C{j}", marker="x", linestyle="none", markersize=4)
        ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
        ax.set_yscale("log")
        ax.set_title(s, fontsize=9)
        ax.tick_params(labelsize=7)
        if k % cols == 0:
            ax.set_ylabel("E2E / oracle", fontsize=8)
        if k // cols == rows - 1:
            ax.set_xlabel("round", fontsize=8)
    for k in range(len(scen), rows * cols):
        axes[k // cols][k % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=7)
    fig.suptitle("Convergence: measured round E2E / oracle (median over seeds; x: most seeds OOM)", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
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
        paths.append(plot_gantt(result, g, out / f"gantt_{g}_all_gpu_vs_oracle.png"))
    return paths
