"""Render a load study (``experiments/traffic.py``): a latency-vs-load plot and ``report.md``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsched.report import style

LOAD_FIGURE = "latency_vs_load.png"
LOAD_OUTPUTS = ("load.json", "report.md", LOAD_FIGURE)  # the files `load` writes in its folder
COLUMNS = (
    "policy",
    "load",
    "rate_per_s",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "throughput_per_s",
    "oom",
    "errors",
    "gpu_util",
    "decision_ms_p50",
)


@dataclass(frozen=True)
class Series:
    """One policy's lines on the latency-vs-load plot."""

    policy: str
    color: str
    loads: list[float]
    p99_ms: list[float]
    p50_ms: list[float]
    omits_oom: bool  # some of its percentiles omit invocations lost to OOM (marked on the plot)


def series(doc: dict[str, Any]) -> tuple[list[Series], list[str]]:
    """Each policy's lines, in its own colour (``style.policy_colors``: one per policy, never shared), and
    the policies that have no line: every invocation of every row lost (to OOM or errors), no percentile."""
    policies = list(dict.fromkeys(r["policy"] for r in doc["rows"]))
    colors = dict(zip(policies, style.policy_colors(len(policies)), strict=True))
    out, lost = [], []
    for name in policies:
        rows = [r for r in doc["rows"] if r["policy"] == name and r["p99_ms"] is not None]
        if not rows:
            lost.append(name)
            continue
        omits = any(r.get("oom") for r in doc["rows"] if r["policy"] == name)
        out.append(
            Series(
                name,
                colors[name],
                [r["load"] for r in rows],
                [r["p99_ms"] for r in rows],
                [r["p50_ms"] for r in rows],
                omits,
            )
        )
    return out, lost


def plot_latency_vs_load(doc: dict[str, Any], path: Path) -> Path:
    """p50 (dashed) and p99 (solid) latency per policy against load, log y. A policy whose percentiles
    omit OOM'd invocations is marked (``*`` in its legend entry); one with no line is named in a note,
    not given a legend entry."""
    plt = style.plt()
    fig, ax = plt.subplots(figsize=(8.0, 4.6))
    lines, lost = series(doc)
    for s in lines:
        label = f"{style.safe_label(s.policy)} p99" + (" *" if s.omits_oom else "")
        ax.plot(s.loads, s.p99_ms, marker="o", color=s.color, label=label)
        ax.plot(s.loads, s.p50_ms, ls="--", color=s.color, alpha=0.7)
    notes = []
    if any(s.omits_oom for s in lines):
        notes.append("* percentiles omit the invocations lost to OOM")
    if lost:
        notes.append("no line (every invocation lost): " + ", ".join(style.safe_label(n) for n in lost))
    if notes:
        fig.text(0.01, 0.01, "; ".join(notes), fontsize=7, ha="left", va="bottom")
    ax.set_yscale("log")
    ax.set_xlabel("load (arrival rate / capacity)")
    ax.set_ylabel("latency (ms): p99 solid, p50 dashed")
    if lines:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def load_markdown(doc: dict[str, Any], figure: str | None) -> str:
    """``report.md``: the setup, the capacity and the table of rows."""
    m = doc["machine"]
    lines = [
        "# Scheduling under load",
        "",
        f"Machine: VRAM budget {'none' if m['vram_budget_mb'] is None else _cell(m['vram_budget_mb']) + ' MB'}, "
        f"{m['cpu_slots']} CPU slots, world "
        f"{m['world']}, noise sigma {m['noise_sigma']:g}. Arrivals: {doc['arrival']}, "
        f"{doc['duration_s']:g} simulated s, {doc['seeds']} seed(s).",
        "",
        f"Load = arrival rate / capacity; capacity = {doc['capacity_per_s']:g} invocations/s, "
        + (
            "the best saturation throughput of the baselines (docs/load.md)."
            if doc.get("capacity_searched", True)
            else "as given (--capacity-per-s: no search ran)."
        ),
        "",
    ]
    if figure:
        lines += [f"![latency vs load]({figure})", ""]
    lines += ["| " + " | ".join(COLUMNS) + " | max slowdown |", "|" + "---|" * (len(COLUMNS) + 1)]
    for r in doc["rows"]:
        worst = max(r["slowdown_by_workflow"].values(), default=None)
        cells = [
            _cell(r[c]) + (" *" if c == "p99_ms" and r.get("oom") and r["p99_ms"] is not None else "") for c in COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + f" | {_cell(worst)} |")
    if any(r.get("oom") for r in doc["rows"]):
        lines += [
            "",
            '\\* the percentiles of a row with oom > 0 omit the invocations lost to OOM; "-": every '
            "invocation of that row was lost.",
        ]
    floor = doc.get("isolation_floor") or []
    if floor:
        lines += [
            "",
            "Isolation floor (each arrival's latency alone on the machine; no policy goes below it, noise "
            "aside): "
            + "; ".join(f"load {f['load']:g}: p50 {_cell(f['p50_ms'])} ms, p99 {_cell(f['p99_ms'])} ms" for f in floor),
        ]
    if doc["saturation_throughput_per_s"]:
        lines += [
            "",
            "Throughput at saturation (the highest Poisson rate each policy sustains, invocations/s): "
            + ", ".join(f"{k} {v:g}" for k, v in doc["saturation_throughput_per_s"].items()),
        ]
    lines.append("")
    return "\n".join(lines)


def write_load_report(doc: dict[str, Any], out_dir: Path, *, plot: bool = True) -> Path:
    """Write the plot (when asked) and ``report.md`` into ``out_dir``; return the report's path."""
    figure = None
    if plot and doc["rows"]:
        plot_latency_vs_load(doc, out_dir / LOAD_FIGURE)
        figure = LOAD_FIGURE
    path = out_dir / "report.md"
    path.write_text(load_markdown(doc, figure))
    return path
