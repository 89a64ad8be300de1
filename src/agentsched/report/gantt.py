"""Gantt charts of executions: a CPU lane, GPU lanes (gpu_now / gpu_queue with its load-in hatched)
and VRAM in use over time against the budget. matplotlib is imported lazily (Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentsched.model.execution import Execution
from agentsched.model.workflow import Mode, Workflow

GANTT_FORMATS = (".png", ".svg", ".pdf")  # what the chart can be written as


def check_gantt_path(path: str | Path) -> Path:
    """Validate an output path before any work: a known suffix, in an existing folder, not a folder."""
    from agentsched.errors import AgentschedError

    p = Path(path)
    if p.is_dir():
        raise AgentschedError(f"--gantt {path}: is a folder; give a file name such as {p / 'gantt.png'}")
    if p.suffix.lower() not in GANTT_FORMATS:
        raise AgentschedError(f"--gantt {path}: unsupported format (use {', '.join(GANTT_FORMATS)})")
    if not p.parent.is_dir():
        raise AgentschedError(f"--gantt {path}: folder {p.parent} does not exist")
    return p


_COLORS = {Mode.CPU: "#4C72B0", Mode.GPU_NOW: "#55A868", Mode.GPU_QUEUE: "#C44E52"}


def save_gantt(workflow: Workflow, runs: Sequence[tuple[str, Execution]], path: str | Path) -> Path:
    """Draw one panel per (title, execution), stacked, each with its VRAM curve; write a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(runs)
    fig, axes = plt.subplots(2 * n, 1, figsize=(10, 3.2 * n + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1.2] * n})
    horizon = max((s.end_ms or x.elapsed_ms) for _, x in runs for s in x.spans) if any(
        x.spans for _, x in runs) else 1.0
    for i, (title, ex) in enumerate(runs):
        ax, axv = axes[2 * i][0], axes[2 * i + 1][0]
        lanes = ["CPU"] + [f"GPU:{s.task}" for s in ex.spans if s.mode is not Mode.CPU]
        cpu_tasks = [s for s in ex.spans if s.mode is Mode.CPU]
        ylabels = [f"CPU:{s.task}" for s in cpu_tasks] + [lbl for lbl in lanes[1:]]
        y = 0
        for s in ex.spans:
            end = s.end_ms if s.end_ms is not None else ex.elapsed_ms
            if s.load_ms > 0:
                ax.barh(y, s.load_ms, left=s.start_ms, color=_COLORS[s.mode], alpha=0.35, hatch="//",
                        edgecolor="black", linewidth=0.5)
            ax.barh(y, end - s.start_ms - s.load_ms, left=s.start_ms + s.load_ms,
                    color=_COLORS[s.mode], edgecolor="black", linewidth=0.5)
            ax.text(s.start_ms + (end - s.start_ms) / 2, y, f"{s.task} {s.tool}", ha="center",
                    va="center", fontsize=7, color="white" if end - s.start_ms > horizon * 0.12 else "black")
            y += 1
        ax.set_yticks(range(len(ex.spans)))
        ax.set_yticklabels([f"{s.task} ({workflow.decision_space.label(s.mode)})" for s in ex.spans], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, horizon * 1.02)
        e2e = f"{ex.e2e_ms:,.0f} ms" if ex.e2e_ms is not None else f"{ex.status.value} at {ex.elapsed_ms:,.0f} ms"
        ax.set_title(f"{workflow.name} {title}: {e2e}", fontsize=9)
        del lanes, ylabels
        ts = [t for t, _ in ex.vram_timeline] + [ex.elapsed_ms]
        vs = [v for _, v in ex.vram_timeline]
        axv.step(ts, vs + [vs[-1]] if vs else [0, 0], where="post", color="#8172B2")
        if workflow.vram_budget_mb is not None:
            axv.axhline(workflow.vram_budget_mb, color="red", linestyle="--", linewidth=1, label="budget")
            axv.legend(fontsize=7, loc="upper right")
        axv.set_xlim(0, horizon * 1.02)
        axv.set_ylabel("VRAM MB", fontsize=8)
        axv.tick_params(labelsize=7)
    axes[-1][0].set_xlabel("time (ms)")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        from agentsched.errors import AgentschedError

        raise AgentschedError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out
