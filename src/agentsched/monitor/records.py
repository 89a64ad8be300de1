"""What the runtime monitor reports: frozen records, each JSON-serialisable through ``to_dict``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def mapping_dict(mapping: dict[str, Mode]) -> dict[str, str]:
    return {t: m.value for t, m in mapping.items()}


@dataclass(frozen=True)
class HistoryEntry:
    """One round as the monitor keeps it (the execution-history stream)."""

    round: int  # 0-based round index
    mapping: dict[str, Mode]  # task id -> mode proposed for the round
    status: Status  # ok, or the round's first failure
    e2e_ms: float | None  # the round's median E2E; None when infeasible
    peak_vram_mb: float  # max VRAM held over the round's runs (oom: what the failing start needed)
    message: str = ""  # why the round failed ("" when ok)
    failed_task: str | None = None  # the task whose start broke the budget, when the testbed says
    judged: bool = True  # False: every run failed in host code, no verdict on the mapping (RoundResult.judged)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "mapping": mapping_dict(self.mapping),
            "status": self.status.value,
            "e2e_ms": _r(self.e2e_ms),
            "peak_vram_mb": _r(self.peak_vram_mb),
            "message": self.message,
            "failed_task": self.failed_task,
            "judged": self.judged,
        }


@dataclass(frozen=True)
class BestMapping:
    """The best feasible mapping run as a round so far."""

    mapping: dict[str, Mode]  # task id -> mode
    e2e_ms: float  # mean E2E over every run of this mapping (rounds and probes)
    samples: int  # how many runs the mean pools
    first_round: int  # the round it was first proposed in

    def to_dict(self) -> dict[str, Any]:
        return {
            "mapping": mapping_dict(self.mapping),
            "e2e_ms": _r(self.e2e_ms),
            "samples": self.samples,
            "first_round": self.first_round,
        }


@dataclass(frozen=True)
class LatencyAverage:
    """Sliding-window mean latency of one task in one mode (Factor A evidence)."""

    task: str  # task id
    tool: str  # tool label, e.g. clip_x12
    mode: Mode  # where it ran
    mean_ms: float  # mean of the window's run latencies (queue load excluded)
    samples: int  # runs in the window
    card_ms: float | None  # the isolated card latency for this mode (warm start); None in cold start

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "tool": self.tool,
            "mode": self.mode.value,
            "mean_ms": _r(self.mean_ms),
            "samples": self.samples,
            "card_ms": _r(self.card_ms),
        }


@dataclass(frozen=True)
class WhatIf:
    """A measured consequence: the current mapping with one task moved (or two, for a swap)."""

    kind: str  # "reprobe", "swap" or "confirm"
    label: str  # as the paper prints it: "B->cpu", "SWAP C<->B"
    task: str  # the task moved
    mode: Mode  # where it was moved
    swapped: str | None  # swap only: the gpu_now task sent to gpu_queue to make room
    mapping: dict[str, Mode]  # the complete mapping that was executed
    status: Status  # this measurement's status
    e2e_ms: float | None  # this measurement's E2E; None when infeasible
    mean_e2e_ms: float | None  # mean over every feasible run of this mapping so far
    samples: int  # how many runs that mean pools
    peak_vram_mb: float  # this measurement's peak VRAM (oom: what the failing start needed)
    message: str  # why it failed ("" when ok)
    executed: bool  # False when answered from an earlier run of the same mapping (no new execution)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "task": self.task,
            "mode": self.mode.value,
            "swapped": self.swapped,
            "mapping": mapping_dict(self.mapping),
            "status": self.status.value,
            "e2e_ms": _r(self.e2e_ms),
            "mean_e2e_ms": _r(self.mean_e2e_ms),
            "samples": self.samples,
            "peak_vram_mb": _r(self.peak_vram_mb),
            "message": self.message,
            "executed": self.executed,
        }


@dataclass(frozen=True)
class Hint:
    """An exploration hint: a placement never seen in a feasible run. Never a whole mapping."""

    text: str  # the line shown to the scheduler
    task: str  # task id
    mode: Mode  # the unexplored placement
    vram_mb: float | None  # VRAM the task is known to hold on the GPU (card or observed); None: unknown
    free_mb: float | None  # budget left beside the best mapping's gpu_now tasks; None: no budget/unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "task": self.task,
            "mode": self.mode.value,
            "vram_mb": _r(self.vram_mb),
            "free_mb": _r(self.free_mb),
        }


@dataclass(frozen=True)
class Evidence:
    """Everything the monitor adds after one round (the what-if stream), plus the history entry."""

    round: int  # the round just observed
    contention: bool  # Factor A detected (sticky)
    memory_pressure: bool  # Factor B detected (sticky)
    active: tuple[str, ...]  # mechanisms that ran this round
    entry: HistoryEntry  # this round
    best: BestMapping | None  # best feasible round mapping so far
    averages: tuple[LatencyAverage, ...]  # Factor A running averages (empty when inactive)
    unobserved: tuple[tuple[str, Mode], ...]  # (task, mode) pairs never seen in a feasible run
    whatifs: tuple[WhatIf, ...]  # reprobes, swaps and confirmations of this round, in probe order
    hints: tuple[Hint, ...]  # exploration hints of this round
    observed_vram_mb: dict[str, float]  # task -> VRAM it was seen holding on the GPU
    probes: int  # probe executions this round
    probes_total: int  # probe executions in the run so far
    notes: tuple[str, ...]  # one-line remarks (budget exhausted, factor newly detected)
    summary: tuple[str, ...]  # short human lines, as the paper's Figures 6/7 print them

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "factors": {"contention": self.contention, "memory_pressure": self.memory_pressure},
            "active": list(self.active),
            "entry": self.entry.to_dict(),
            "best": None if self.best is None else self.best.to_dict(),
            "running_averages": [a.to_dict() for a in self.averages],
            "unobserved": [[t, m.value] for t, m in self.unobserved],
            "whatifs": [w.to_dict() for w in self.whatifs],
            "hints": [h.to_dict() for h in self.hints],
            "observed_vram_mb": {t: _r(v) for t, v in self.observed_vram_mb.items()},
            "probes": self.probes,
            "probes_total": self.probes_total,
            "notes": list(self.notes),
            "summary": list(self.summary),
        }
