"""The profiler's sweep over input sizes: one tool on one device timed at several sizes spanning >= 10x,
and cost curves fitted to the medians, with the fit's error.

Inputs of a given size come, in order of preference, from the tool's ``sized_inputs(size)`` (one load,
every size), from a built-in tool's ``with_size(size)`` (its generated inputs rebuilt at that size: one
load per size, the load untimed), or from ``example_inputs()`` scaled (its strings, bytes and lists
repeated). The size recorded is the one ``measure_size`` gives for the inputs actually timed.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agentsched.errors import validation_line
from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.curve_fit import KINDS, FitReport, fit_report
from agentsched.model.curves import CardCurves
from agentsched.model.sizes import measure_size
from agentsched.profiler.profiler import ProfileError, _phase, _profiled_tool

MIN_SPAN = 10.0  # largest / smallest size a sweep must cover
DEFAULT_STEPS = (-2, -1, 0, 1, 2, 3)  # powers of two around the tool's default size: a 32x span


@dataclass
class SizeSweep:
    """One tool on one device at several sizes."""

    tool: str
    device: str  # "cpu" or "cuda"
    unit: str  # the tool's size unit
    sizes: list[float]  # the sizes timed, ascending (as measured on the inputs)
    calls_ms: list[list[float]]  # per size, every timed call
    vram_mb: list[float] = field(default_factory=list)  # per size, peak GPU memory (empty on the CPU)
    fit: FitReport | None = None  # the time curve fitted to the medians
    vram_fit: FitReport | None = None  # the VRAM curve (GPU sweeps)
    ref_size: float | None = None  # the tool's default size (what its card's constants were measured at)

    @property
    def medians_ms(self) -> list[float]:
        return [statistics.median(c) for c in self.calls_ms]

    @property
    def span(self) -> float:
        pos = [s for s in self.sizes if s > 0]
        return max(pos) / min(pos) if pos else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "device": self.device,
            "unit": self.unit,
            "sizes": self.sizes,
            "median_ms": [round(m, 4) for m in self.medians_ms],
            "vram_mb": [round(v, 2) for v in self.vram_mb],
            "fit": None if self.fit is None else self.fit.to_dict(),
            "vram_fit": None if self.vram_fit is None else self.vram_fit.to_dict(),
        }


def default_sizes(default: float, integer: bool) -> list[float]:
    """Powers of two around the tool's default size, at least ``MIN_SPAN`` apart end to end."""
    base = max(default, 1.0 if integer else 1e-3)
    sizes = sorted({(max(1, round(base * 2.0**k)) if integer else base * 2.0**k) for k in DEFAULT_STEPS})
    while sizes[-1] / sizes[0] < MIN_SPAN:
        sizes.append(sizes[-1] * 2)
    return [float(s) for s in sizes]


def scale_inputs(inputs: Any, factor: float) -> Any:
    """``inputs`` with every string, bytes and list repeated to about ``factor`` times its length."""
    if isinstance(inputs, dict):
        return {k: scale_inputs(v, factor) for k, v in inputs.items()}
    if isinstance(inputs, (str, bytes, list, tuple)) and len(inputs) > 0:
        n = max(1, round(len(inputs) * factor))
        reps = inputs * (n // len(inputs) + 1)
        return reps[:n]
    return inputs


def _validate(sizes: list[float] | None, runs: int, kind: str) -> None:
    if runs < 1:
        raise ProfileError(f"need runs >= 1 per size, got {runs}")
    if kind not in KINDS:
        raise ProfileError(f"unknown curve kind {kind!r} (valid: {', '.join(KINDS)})")
    if sizes is not None:
        if len(sizes) < 3 or any(not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0) for s in sizes):
            raise ProfileError(f"sizes must be 3 or more numbers above 0, got {sizes!r:.80}")
        if max(sizes) / min(sizes) < MIN_SPAN:
            raise ProfileError(f"sizes span {max(sizes) / min(sizes):.3g}x; a sweep must span >= {MIN_SPAN:g}x")


class _Sizer:
    """Makes a loaded tool and its inputs at a size, by the first of the three ways that works."""

    def __init__(self, name: str, scale: str, seed: int, device: str) -> None:
        self.name, self.device = name, device
        self.tool, self.example = _profiled_tool(name, scale, seed)
        self.unit = getattr(self.tool, "size_unit", "bytes")
        self.base = measure_size(self.tool, self.example).value

    def at(self, size: float) -> tuple[Any, dict[str, Any]]:
        with _phase(self.name, "sized_inputs", ""):
            given = self.tool.sized_inputs(size)
        if given is not None:
            return self.tool, given
        if hasattr(self.tool, "with_size") and getattr(self.tool, "size_param", None) is not None:
            with _phase(self.name, "with_size", ""):
                return self.tool.with_size(size), {}
        if self.base <= 0:
            raise ProfileError(
                f"tool {self.name}: example_inputs() have size 0 and no sized_inputs(): "
                "the profiler cannot make inputs of other sizes"
            )
        return self.tool, scale_inputs(self.example, size / self.base)

    def default_size(self) -> tuple[float, bool]:
        param = getattr(self.tool, "size_param", None)
        if param is not None:
            v = self.tool.params[param]
            return float(v), isinstance(v, int)
        return self.base, self.unit != "bytes"


def _cuda_baseline() -> int:
    """GPU memory allocated before the sweep loads anything (what a tool's peak is measured above)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated())


def _time(
    tool: Any, inputs: dict[str, Any], device: str, runs: int, warmup: int, name: str, base_mem: int
) -> tuple[list, float]:
    """Load (untimed, kept when already there), time the calls; on CUDA the peak memory above ``base_mem``."""
    cuda = device.startswith("cuda")
    if cuda:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with _phase(name, "load", device):
        tool.load(device)
        tool.sync()
    with _phase(name, "run", device):
        for _ in range(warmup):
            tool.run(inputs)
            tool.sync()
        calls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            tool.run(inputs)
            tool.sync()
            calls.append(max((time.perf_counter() - t0) * 1000, 1e-3))
    vram = 0.0
    if cuda:
        import torch

        vram = (torch.cuda.max_memory_allocated() - base_mem) / 2**20
    return calls, vram


def sweep_sizes(
    name: str,
    device: str = "cpu",
    *,
    scale: str = "small",
    sizes: list[float] | None = None,
    runs: int = 3,
    warmup: int = 1,
    seed: int = 0,
    kind: str = "power",
) -> SizeSweep:
    """Time ``name`` on ``device`` at each size (default: powers of two around its default size, a 32x span)
    and fit a ``kind`` curve to the medians. One-line ProfileError for a bad request or a failing tool."""
    _validate(sizes, runs, kind)
    sizer = _Sizer(name, scale, seed, device)
    if device.startswith("cuda") and not getattr(sizer.tool, "has_gpu", True):
        device = "cpu"
    default, integer = sizer.default_size()
    plan = sorted(sizes) if sizes is not None else default_sizes(default, integer)
    measured: list[tuple[float, list[float], float]] = []
    loaded: list[Any] = []
    base_mem = _cuda_baseline() if device.startswith("cuda") else 0
    try:
        for target in plan:
            tool, inputs = sizer.at(target)
            if tool is not sizer.tool:
                loaded.append(tool)
            calls, vram = _time(tool, inputs, device, runs, warmup, name, base_mem)
            measured.append((measure_size(tool, inputs).value, calls, vram))
            if tool is not sizer.tool:  # one rebuilt tool at a time
                tool.unload()
                loaded.remove(tool)
    finally:
        for t in (*loaded, sizer.tool):
            try:
                t.unload()
            except Exception:  # noqa: BLE001, S110 - the measurement's own error (if any) is the one to report
                pass
        gc.collect()
    measured.sort(key=lambda m: m[0])
    sweep = SizeSweep(
        tool=name,
        device="cuda" if device.startswith("cuda") else "cpu",
        unit=sizer.unit,
        sizes=[m[0] for m in measured],
        calls_ms=[m[1] for m in measured],
        vram_mb=[m[2] for m in measured] if device.startswith("cuda") else [],
    )
    if sweep.span < MIN_SPAN:
        raise ProfileError(
            f"tool {name}: the inputs made span only {sweep.span:.3g}x in {sweep.unit} "
            f"(need {MIN_SPAN:g}x): its sized_inputs() or size() may not follow the size asked"
        )
    sweep.ref_size = default
    sweep.fit = fit_report(kind, sweep.sizes, sweep.medians_ms)
    if sweep.vram_mb and max(sweep.vram_mb) > 0:
        sweep.vram_fit = fit_report("linear", sweep.sizes, [max(v, 1e-3) for v in sweep.vram_mb])
    return sweep


def card_curves(sweeps: list[SizeSweep]) -> CardCurves:
    """One tool's card curves from its sweeps (a CPU one, a GPU one, or both), with each fit's error."""
    if not sweeps or len({s.tool for s in sweeps}) != 1 or len({s.unit for s in sweeps}) != 1:
        raise ProfileError("card curves need sweeps of one tool, in one size unit")
    fields: dict[str, Any] = {"unit": sweeps[0].unit, "ref_size": sweeps[0].ref_size, "fit_error": {}}
    for s in sweeps:
        if s.fit is None:
            continue
        key = "gpu_ms" if s.device == "cuda" else "cpu_ms"
        fields[key] = s.fit.curve
        fields["fit_error"][key] = round(s.fit.median_error, 4)
        if s.vram_fit is not None:
            fields["vram_mb"] = s.vram_fit.curve
            fields["fit_error"]["vram_mb"] = round(s.vram_fit.median_error, 4)
    return CardCurves.model_validate(fields)


def with_curves(cards: CardSet, sweeps: list[SizeSweep]) -> CardSet:
    """``cards`` with each swept tool's ``curves`` replaced by its sweeps' (one-line ProfileError when a swept
    tool has no card, or its curves do not fit its card: a GPU curve on a host-only card)."""
    by_tool: dict[str, list[SizeSweep]] = {}
    for s in sweeps:
        by_tool.setdefault(s.tool, []).append(s)
    out = dict(cards.cards)
    for tool, group in by_tool.items():
        if tool not in out:
            raise ProfileError(f"tool {tool}: swept but has no card to hold its curves")
        try:
            out[tool] = ToolCard.model_validate({**out[tool].model_dump(), "curves": card_curves(group)})
        except ValidationError as e:
            raise ProfileError(f"tool {tool}: its curves do not fit its card: {validation_line(e.errors())}") from None
    return cards.model_copy(update={"cards": out})
