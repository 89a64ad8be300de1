"""Evidence as short human lines, the way the paper's Figures 6/7 print it."""

from __future__ import annotations

from agentsched.model.execution import Status
from agentsched.model.workflow import DecisionSpace
from agentsched.monitor.records import Evidence, LatencyAverage, WhatIf


def whatif_line(w: WhatIf, space: DecisionSpace, budget_mb: float | None) -> str:
    """``what-if B->cpu: 3660 ms``, ``SWAP C<->B: 1585 ms``, ``what-if C->gpu_now: INFEASIBLE (...)``."""
    head = w.label if w.kind == "swap" else f"{'re-measure' if w.kind == 'confirm' else 'what-if'} {w.label}"
    if not w.ok:
        if w.status is Status.OOM and budget_mb is not None:
            return f"{head}: INFEASIBLE ({w.peak_vram_mb:.0f} > {budget_mb:.0f} MB)"
        return f"{head}: {w.status.value.upper()} ({w.message})"
    if not w.executed:
        many = f"mean of {w.samples}, " if w.samples > 1 else ""
        return f"{head}: {w.mean_e2e_ms:.0f} ms ({many}measured before)"
    text = f"{head}: {w.e2e_ms:.0f} ms"
    if w.samples > 1:
        text += f" (mean of {w.samples}: {w.mean_e2e_ms:.0f} ms)"
    return text


def average_lines(averages: tuple[LatencyAverage, ...], space: DecisionSpace, *, cards: bool = False) -> list[str]:
    """One line per task: ``running avg A gpu 724 ms / cpu 5294 ms`` (card figures in brackets)."""
    by_task: dict[str, list[LatencyAverage]] = {}
    for a in averages:
        by_task.setdefault(a.task, []).append(a)
    lines = []
    for t, avs in by_task.items():
        parts = []
        for a in avs:
            part = f"{space.label(a.mode)} {a.mean_ms:.0f} ms"
            if cards and a.card_ms is not None:
                part += f" [card {a.card_ms:.0f}]"
            parts.append(part)
        lines.append(f"running avg {t} {' / '.join(parts)}")
    return lines


def summary_lines(ev: Evidence, space: DecisionSpace, budget_mb: float | None) -> list[str]:
    lines = []
    if ev.best is not None:
        lines.append(
            f"best so far: {ev.best.e2e_ms:.0f} ms (first run R{ev.best.first_round}, mean of {ev.best.samples})"
        )
    lines.extend(f"note: {n}" for n in ev.notes)
    lines.extend(average_lines(ev.averages, space))
    lines.extend(whatif_line(w, space, budget_mb) for w in ev.whatifs)
    lines.extend(h.text for h in ev.hints)
    return lines
