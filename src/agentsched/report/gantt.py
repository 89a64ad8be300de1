"""Gantt charts of executions: a CPU lane, GPU lanes (gpu_now / gpu_queue with its load-in hatched)
and VRAM in use over time against the budget. matplotlib is imported lazily (Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentsched.model.execution import Execution
from agentsched.model.workflow import Mode, Workflow

GANTT_FORMATS = (".png", ".svg", ".pdf")  # what a chart (Gantt, learning curve) can be written as


def check_figure_path(path: str | Path, flag: str) -> Path:
    """Validate a chart's output path before any work: a known suffix, in an existing folder, not a
    folder. ``flag`` names the option in the one-line error (``--gantt``, ``--plot``)."""
    from agentsched.errors import AgentschedError

    p = Path(path)
    if p.is_dir():
        raise AgentschedError(f"{flag} {path}: is a folder; give a file name such as {p / 'chart.png'}")
    if p.suffix.lower() not in GANTT_FORMATS:
        raise AgentschedError(f"{flag} {path}: unsupported format (use {', '.join(GANTT_FORMATS)})")
    if not p.parent.is_dir():
        raise AgentschedError(f"{flag} {path}: folder {p.parent} does not exist")
    return p


def check_gantt_path(path: str | Path) -> Path:
    """Validate a ``--gantt`` output path before any work (see ``check_figure_path``)."""
    return check_figure_path(path, "--gantt")


_COLORS = {Mode.CPU: "#4C72B0", Mode.GPU_NOW: "#55A868", Mode.GPU_QUEUE: "#C44E52"}
_MEANING = {Mode.CPU: "on the CPU", Mode.GPU_NOW: "on the GPU at once", Mode.GPU_QUEUE: "GPU queue, one at a time"}


def _bar_label(ax, x0: float, x1: float, y: float, text: str, horizon: float, *, inside_color: str) -> None:  # noqa: ANN001
    """``text`` inside the bar when it fits (about 6 ms-widths of the axis per character), else just
    right of the bar's end in black: never white text spilling over a white background."""
    fits = (x1 - x0) >= horizon * 0.0085 * (len(text) + 2)
    if fits:
        ax.text((x0 + x1) / 2, y, text, ha="center", va="center", fontsize=7, color=inside_color, zorder=4)
    else:
        ax.text(x1 + horizon * 0.005, y, text, ha="left", va="center", fontsize=7, color="black", zorder=4)


def _load_bar(ax, s, y: float, horizon: float) -> None:  # noqa: ANN001
    """A queued task's load-in: a hatched bar, labelled with its duration when there is room."""
    ax.barh(
        y,
        s.load_ms,
        left=s.start_ms,
        color=_COLORS[s.mode],
        alpha=0.35,
        hatch="//",
        edgecolor="black",
        linewidth=0.5,
    )
    load_text = f"load {s.load_ms:,.0f} ms"
    if s.load_ms >= horizon * 0.0085 * (len(load_text) + 2):
        ax.text(
            s.start_ms + s.load_ms / 2,
            y,
            load_text,
            ha="center",
            va="center",
            fontsize=6.5,
            color="black",
            zorder=4,
            bbox={"facecolor": "white", "alpha": 0.8, "pad": 0.8, "edgecolor": "none"},
        )


def _task_panel(ax, workflow: Workflow, title: str, ex: Execution, horizon: float, used: set[Mode]) -> bool:  # noqa: ANN001
    """One execution's task bars (one row per span) on ``ax``; adds the modes drawn to ``used``.
    Whether any bar has a load-in."""
    from agentsched.report.style import safe_label

    sp = workflow.decision_space
    any_load = False
    for y, s in enumerate(ex.spans):
        end = s.end_ms if s.end_ms is not None else ex.elapsed_ms
        used.add(s.mode)
        if s.load_ms > 0:
            any_load = True
            _load_bar(ax, s, y, horizon)
        run_start = s.start_ms + s.load_ms
        ax.barh(y, end - run_start, left=run_start, color=_COLORS[s.mode], edgecolor="black", linewidth=0.5)
        _bar_label(ax, run_start, end, y, safe_label(f"{s.task} {s.tool}"), horizon, inside_color="white")
    if not ex.spans:  # an oom in the first instant: nothing started (rules.Infeasible)
        ax.text(0.5, 0.5, "no task started", transform=ax.transAxes, ha="center", va="center", fontsize=9)
    ax.set_yticks(range(len(ex.spans)))
    ax.set_yticklabels([safe_label(f"{s.task} ({sp.label(s.mode)})") for s in ex.spans], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, horizon * 1.12)  # room for labels placed after a bar's end
    ax.set_ylabel("task (mode)", fontsize=8)
    ax.set_xlabel("time (ms)", fontsize=8)
    ax.tick_params(labelsize=7)
    e2e = f"{ex.e2e_ms:,.0f} ms" if ex.e2e_ms is not None else f"{ex.status.value} at {ex.elapsed_ms:,.0f} ms"
    ax.set_title(safe_label(f"{workflow.name} {title}: {e2e}"), fontsize=9)
    return any_load


def _vram_panel(axv, workflow: Workflow, ex: Execution, horizon: float) -> None:  # noqa: ANN001
    """One execution's VRAM in use over time, against the workflow's budget."""
    ts = [t for t, _ in ex.vram_timeline] + [ex.elapsed_ms]
    vs = [v for _, v in ex.vram_timeline]
    axv.step(ts, vs + [vs[-1]] if vs else [0, 0], where="post", color="#8172B2", label="VRAM in use")
    if workflow.vram_budget_mb is not None:
        axv.axhline(workflow.vram_budget_mb, color="red", linestyle="--", linewidth=1, label="budget")
    axv.legend(fontsize=7, loc="upper right")
    axv.set_xlim(0, horizon * 1.12)
    axv.set_ylabel("VRAM MB", fontsize=8)
    axv.set_xlabel("time (ms)", fontsize=8)
    axv.tick_params(labelsize=7)


def _legend(plt, fig, workflow: Workflow, used: set[Mode], any_load: bool) -> None:  # noqa: ANN001
    """The figure's legend: the modes drawn and, when any, the load-in hatching."""
    sp = workflow.decision_space
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor=_COLORS[m], edgecolor="black", linewidth=0.5)
        for m in sp.modes
        if m in used
    ]
    labels = [f"{sp.label(m)}: {_MEANING[m]}" for m in sp.modes if m in used]
    if any_load:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", hatch="//", edgecolor="black", linewidth=0.5))
        labels.append("hatched: model load-in (gpu_queue admission)")
    if labels:  # (matplotlib refuses a legend of 0 columns)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)


def save_gantt(workflow: Workflow, runs: Sequence[tuple[str, Execution]], path: str | Path) -> Path:
    """Draw one panel per (title, execution), stacked, each with its VRAM curve; write a PNG.

    Colour = where the task ran (legend), hatching = a queued task's load-in; each bar is labelled
    with its task and tool (inside when it fits, after the bar otherwise) and each load segment with
    its duration when there is room."""
    from agentsched.report.style import plt as _plt

    plt = _plt()
    n = len(runs)
    fig, axes = plt.subplots(
        2 * n, 1, figsize=(11, 3.4 * n + 1.0), squeeze=False, gridspec_kw={"height_ratios": [3, 1.2] * n}
    )
    horizon = (
        max((s.end_ms or x.elapsed_ms) for _, x in runs for s in x.spans) if any(x.spans for _, x in runs) else 1.0
    )
    used: set[Mode] = set()
    any_load = False
    for i, (title, ex) in enumerate(runs):
        any_load |= _task_panel(axes[2 * i][0], workflow, title, ex, horizon, used)
        _vram_panel(axes[2 * i + 1][0], workflow, ex, horizon)
    _legend(plt, fig, workflow, used, any_load)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
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
