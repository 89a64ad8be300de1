"""Execution records: what a testbed returns for one run of a workflow under one mapping.

Plain frozen dataclasses (not pydantic) because the simulator builds tens of thousands per second.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agentsched.model.workflow import Mode


class Status(str, enum.Enum):
    OK = "ok"  # every task finished
    OOM = "oom"  # a GPU start exceeded the VRAM budget (or a real CUDA out-of-memory): infeasible
    ERROR = "error"  # a tool raised

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # results print as plain strings (a Status is one: Status.OK == "ok")
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class TaskSpan:
    """One task's part of the timeline."""

    task: str  # task id
    tool: str  # tool label, e.g. clip_x12
    mode: Mode  # where it ran
    ready_ms: float  # when its dependencies were done
    start_ms: float  # when it started (for gpu_queue: admission, load begins)
    end_ms: float | None  # when it finished; None when the execution stopped first
    load_ms: float = 0.0  # load-in paid at the start (gpu_queue only)
    vram_mb: float = 0.0  # VRAM held from start to end
    size: float | None = None  # the call's input size (model.sizes.measure_size); None: not measured
    size_unit: str = ""  # the unit of ``size`` (the tool's size_unit, or "bytes")

    @property
    def duration_ms(self) -> float | None:
        return None if self.end_ms is None else self.end_ms - self.start_ms

    @property
    def run_ms(self) -> float | None:
        """Latency of the tool itself (queue load excluded): what a monitor averages per (tool, mode)."""
        return None if self.end_ms is None else self.end_ms - self.start_ms - self.load_ms

    def to_dict(self) -> dict[str, Any]:
        out = {
            "task": self.task,
            "tool": self.tool,
            "mode": self.mode.value,
            "ready_ms": round(self.ready_ms, 3),
            "start_ms": round(self.start_ms, 3),
            "end_ms": None if self.end_ms is None else round(self.end_ms, 3),
            "load_ms": round(self.load_ms, 3),
            "vram_mb": round(self.vram_mb, 3),
        }
        if self.size is not None:  # only where sizes are measured: older documents keep their fields
            out.update(size=round(self.size, 6), size_unit=self.size_unit)
        return out


@dataclass(frozen=True, slots=True)
class Execution:
    """Result of one run of a workflow under one mapping."""

    status: Status
    mapping: dict[str, Mode]  # task id -> mode
    e2e_ms: float | None  # completion of the last sink; None unless status is ok
    elapsed_ms: float  # time the run took before it ended or failed (the cost of an infeasible run)
    peak_vram_mb: float  # max VRAM held; for oom, what the failing start would have needed
    spans: tuple[TaskSpan, ...]  # per-task timeline in start order
    vram_timeline: tuple[tuple[float, float], ...] = ()  # (t_ms, vram_mb in use) after each change
    message: str = ""  # why it failed, one line ("" when ok)
    testbed: str = "sim"  # which testbed produced it
    extra: dict[str, Any] = field(default_factory=dict)  # testbed-specific details
    # every finished task's output, by task id (empty on the simulator, which computes none);
    # not part of to_dict(): outputs are whatever the tools return
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def placement_failed(self) -> bool:
        """Did it fail where its placement may be the cause? An oom, or a placed task that raised,
        counts (it cannot be told apart from a tool that fails on its device); a failure of the host
        code around the placed tasks (``extra["failed_node"]``: a LangGraph host node, an LLM call
        that raised) does not: the same run fails under any mapping, and a learner must not hold it
        against this one."""
        return not self.ok and not (self.status is Status.ERROR and "failed_node" in self.extra)

    def span(self, task: str) -> TaskSpan | None:
        for s in self.spans:
            if s.task == task:
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mapping": {k: v.value for k, v in self.mapping.items()},
            "status": self.status.value,
            "e2e_ms": None if self.e2e_ms is None else round(self.e2e_ms, 3),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "peak_vram_mb": round(self.peak_vram_mb, 3),
            "message": self.message,
            "testbed": self.testbed,
            "timeline": [s.to_dict() for s in self.spans],
        }
