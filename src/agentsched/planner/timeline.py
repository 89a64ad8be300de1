"""What one execution shows, as observations for the model: CPU latencies, queue loads, VRAM
held, and for every GPU run its life cut into segments by the starts and ends of the other GPU
runs beside it (a load neither presses nor suffers, so only run phases count).

Pure functions over ``Execution`` records; nothing here knows the testbed's world.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentsched.model.execution import Execution, TaskSpan
from agentsched.model.workflow import Mode


@dataclass(frozen=True, slots=True)
class GpuRun:
    """One GPU run phase: its segments (duration_ms, tasks running on the GPU beside it)."""

    task: str
    segments: tuple[tuple[float, tuple[str, ...]], ...]

    @property
    def run_ms(self) -> float:
        return sum(d for d, _ in self.segments)

    @property
    def isolated(self) -> bool:
        return all(not others for _, others in self.segments)


@dataclass(frozen=True, slots=True)
class ExecutionObservations:
    """Everything one execution says about the tools."""

    cpu_ms: tuple[tuple[str, float], ...]  # (task, latency) of finished CPU runs
    load_ms: tuple[tuple[str, float], ...]  # (task, load) of queue admissions that loaded
    vram_mb: tuple[tuple[str, float], ...]  # (task, VRAM held) of GPU starts
    gpu: tuple[GpuRun, ...]  # finished GPU runs with their overlap segments


def observe(x: Execution, runs_on_gpu: Callable[[TaskSpan], bool]) -> ExecutionObservations:
    """Observations of ``x``. ``runs_on_gpu(span)``: did that task really run on the GPU (a host-only
    tool placed on a GPU mode runs on the CPU)."""
    cpu, load, vram = [], [], []
    phases: list[tuple[str, float, float, bool]] = []  # (task, run start, run end, finished)
    for s in x.spans:
        on_gpu = s.mode is not Mode.CPU and runs_on_gpu(s)
        if not on_gpu:
            if s.end_ms is not None:
                cpu.append((s.task, s.end_ms - s.start_ms))
            continue
        vram.append((s.task, s.vram_mb))
        run_start = s.start_ms + s.load_ms
        if s.load_ms > 0 and (s.end_ms is not None or x.elapsed_ms >= run_start):
            load.append((s.task, s.load_ms))
        end = s.end_ms if s.end_ms is not None else x.elapsed_ms
        if end > run_start:
            phases.append((s.task, run_start, end, s.end_ms is not None))
    return ExecutionObservations(tuple(cpu), tuple(load), tuple(vram), tuple(gpu_segments(phases)))


def gpu_segments(phases: list[tuple[str, float, float, bool]]) -> list[GpuRun]:
    """Cut each finished run phase at every start/end of another (one sweep over the events)."""
    events = sorted({t for _, a, b, _ in phases for t in (a, b)})
    if not events:
        return []
    starts: dict[float, list[int]] = {}
    for i, (_, a, _, _) in enumerate(phases):
        starts.setdefault(a, []).append(i)
    segs: dict[int, list[tuple[float, tuple[str, ...]]]] = {i: [] for i, p in enumerate(phases) if p[3]}
    active: set[int] = set()
    for lo, hi in zip(events, events[1:], strict=False):
        active = {i for i in active if phases[i][2] > lo}
        active.update(starts.get(lo, ()))
        if not active:
            continue
        names = sorted(phases[i][0] for i in active)
        for i in active:
            if i not in segs:
                continue
            own = phases[i][0]
            others = tuple(u for u in names if u != own)
            run = segs[i]
            if run and run[-1][1] == others:  # merge equal neighbours
                run[-1] = (run[-1][0] + hi - lo, others)
            else:
                run.append((hi - lo, others))
    return [GpuRun(phases[i][0], tuple(s)) for i, s in segs.items()]
