"""The runtime's learning curve as a PNG: each round's median E2E and the best so far, by round.
matplotlib is imported lazily (Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_learning_curve(series: dict[str, list[tuple[int, float | None]]], path: Path, title: str) -> Path:
    """``series``: label -> [(round, median E2E ms or None when infeasible)], written to ``path``."""
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(series, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def learning_curve_figure(series: dict[str, list[tuple[int, float | None]]], title: str) -> Any:
    """The figure of ``plot_learning_curve``. Infeasible rounds are drawn as crosses on the axis floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for label, points in series.items():
        ok = [(r, e) for r, e in points if e is not None]
        bad = [r for r, e in points if e is None]
        if ok:
            line = ax.plot([r for r, _ in ok], [e for _, e in ok], marker="o", ms=3, lw=1, label=f"{label}: round E2E")
            best, running = [], float("inf")
            for _, e in ok:
                running = min(running, e)
                best.append(running)
            ax.step(
                [r for r, _ in ok],
                best,
                where="post",
                color=line[0].get_color(),
                ls="--",
                lw=1.5,
                label=f"{label}: best so far",
            )
        if bad:
            floor = min((e for _, e in ok), default=1.0) * 0.9
            ax.plot(bad, [floor] * len(bad), "x", color="red", label=f"{label}: failed round")
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole: no tick at round 0.2
    ax.set_ylabel("median E2E (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no finished round yet: an empty frame, no legend
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no finished round yet", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig
