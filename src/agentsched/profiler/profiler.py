"""The offline profiler: measure each real tool on this machine and write a card set.

Per tool and device: load time (``load()``, model to device), the median of ``runs`` call
latencies after ``warmup`` calls (the paper uses 30 runs), and on a GPU the peak memory the tool
allocated (``torch.cuda.max_memory_allocated`` above the baseline before its load). The result is
a card set in the schema of ``data/cards/a5500.json`` (workload strings and tags copied from it)
with the machine (CPU, GPU, versions) and the load average recorded in ``machine``.

A busy host distorts everything (a loaded 2-core machine inflates latencies 3x to 300x), so
before each tool the profiler samples how much CPU *other* processes use and warns, or waits for
the machine to calm down (``busy="wait"``), and records the figure per tool.
"""

from __future__ import annotations

import datetime as _dt
import gc
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from agentsched.errors import AgentschedError, one_line
from agentsched.model.cards import CardSet, ToolCard, load_card_set
from agentsched.profiler.host import machine_info, wait_until_quiet

BUSY_POLICIES = ("warn", "wait", "ignore")
log = logging.getLogger(__name__)


class ProfileError(AgentschedError):
    """The profiler cannot run as asked (unknown tool/device, GPU missing, nothing to merge)."""


@dataclass
class Measurement:
    """One tool profiled on one device."""

    tool: str  # tool name as profiled (base or name_xK)
    device: str  # "cpu" or "cuda"
    size: str  # "paper" or "small"
    load_ms: float  # wall time of load(): build/read the model, move it and the inputs to the device
    call_ms: float  # median call latency over the timed runs
    calls_ms: list[float] = field(default_factory=list)  # every timed call, in order
    vram_mb: float | None = None  # peak GPU memory the tool allocated (None on the CPU)
    busy_pct: float = 0.0  # CPU use by other processes sampled just before (0-100)
    loadavg_1m: float = 0.0  # 1-minute load average at the start

    @property
    def spread(self) -> float:
        """max / min of the timed calls: > 3 means the measurement was disturbed."""
        lo = min(self.calls_ms) if self.calls_ms else 0.0
        return max(self.calls_ms) / lo if lo > 0 else 1.0


# ---- measuring ---------------------------------------------------------------------------------
def _warm_imports() -> None:
    """Import the heavy libraries and the shared tokenizer once, outside every timed load (user
    tools may need neither)."""
    import importlib

    try:
        for mod in ("torch", "transformers"):
            importlib.import_module(mod)
    except ImportError:
        return
    try:
        from agentsched.tools.text import bert_tokenizer

        bert_tokenizer()
    except ImportError:
        pass


def measure(
    name: str,
    device: str,
    size: str,
    *,
    runs: int,
    warmup: int,
    seed: int = 0,
    busy_pct: float = 0.0,
) -> Measurement:
    """Load ``name`` on ``device``, time ``warmup`` + ``runs`` calls of ``run(inputs)``, unload.
    Holds one tool at a time. A user tool (``package.module:Class``) is timed on its
    ``example_inputs()``; a built-in one on its generated inputs."""
    tool, inputs = _profiled_tool(name, size, seed)
    cuda = device.startswith("cuda") and tool.has_gpu
    if not cuda:
        device = "cpu"
    base_mem = 0
    if cuda:
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
    la = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    try:
        with _phase(name, "load", device):
            t0 = time.perf_counter()
            tool.load(device)
            tool.sync()
            load_ms = (time.perf_counter() - t0) * 1000
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
        vram = None
        if cuda:
            import torch

            vram = (torch.cuda.max_memory_allocated() - base_mem) / 2**20
    finally:
        try:
            tool.unload()
        except Exception as e:  # the load/run error (if any) is the one worth reporting
            log.warning("tool %s: unload() failed: %s", name, one_line(e))
        del tool
        gc.collect()

    return Measurement(
        tool=name,
        device="cuda" if cuda else "cpu",
        size=size,
        load_ms=load_ms,
        call_ms=statistics.median(calls),
        calls_ms=calls,
        vram_mb=vram,
        busy_pct=busy_pct,
        loadavg_1m=la,
    )


@contextmanager
def _phase(name: str, phase: str, device: str) -> Iterator[None]:
    """Turn an exception of a tool's ``phase`` (load, run, example_inputs) into a one-line
    ProfileError naming the tool and the phase: the user's code failed, not the profiler."""
    try:
        yield
    except ProfileError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of user code (MemoryError included)
        first = (str(e).strip().splitlines() or [""])[0]
        where = f" on {device}" if device else ""
        raise ProfileError(
            f"tool {name} failed in {phase}(){where}: {type(e).__name__}" + (f": {first}" if first else "")
        ) from None


def _profiled_tool(name: str, size: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """A new tool for ``name`` and the inputs its calls are timed on."""
    from agentsched.model.tool import is_tool_path, new_tool

    if is_tool_path(name):
        try:
            tool = new_tool(name)
        except AgentschedError as e:
            raise ProfileError(str(e)) from None
        with _phase(name, "example_inputs", ""):
            inputs = tool.example_inputs()
        if not isinstance(inputs, dict):
            raise ProfileError(
                f"tool {name}: example_inputs() returned {type(inputs).__name__} ({inputs!r:.40}), "
                "not a dict of the inputs run() takes: the profiler has nothing to time it on"
            )
        return tool, inputs
    from agentsched.tools import get_tool

    return get_tool(name, size, seed=seed), {}


def resolve_tools(spec: str | list[str]) -> list[str]:
    """'all' or 'a,b,c' (base or name_xK) -> validated names."""
    from agentsched.tools import parse_tool_name, tool_names

    if isinstance(spec, str):
        items = (
            tool_names() if spec.strip().lower() in ("", "all") else [s.strip() for s in spec.split(",") if s.strip()]
        )
    else:
        items = [str(s).strip() for s in spec if str(s).strip()]
    if not items:
        raise ProfileError(
            f"--tools {spec if isinstance(spec, str) else ','.join(map(str, spec))!r} selects no "
            "tools (give 'all' or a comma list, e.g. clip,groupby)"
        )
    from agentsched.model.tool import is_tool_path, tool_class

    for n in items:
        try:
            tool_class(n) if is_tool_path(n) else parse_tool_name(n)
        except AgentschedError as e:
            raise ProfileError(str(e)) from None
    return items


def resolve_devices(spec: str) -> list[str]:
    """'cpu' | 'gpu' | 'all' -> device list; GPU requires CUDA."""
    s = spec.strip().lower()
    if s not in ("cpu", "gpu", "cuda", "all"):
        raise ProfileError(f"unknown --device {spec!r} (valid: cpu, gpu, all)")
    devices = ["cpu"] if s == "cpu" else ["cuda"] if s in ("gpu", "cuda") else ["cpu", "cuda"]
    if "cuda" in devices:
        import torch

        if not torch.cuda.is_available():
            raise ProfileError(f"--device {spec}: this machine has no CUDA GPU (profile with --device cpu)")
    return devices


@dataclass(frozen=True)
class ProfilePlan:
    """A validated profiler request: what ``run_plan`` will measure, and how."""

    jobs: tuple[tuple[str, str], ...]  # (tool, device) in run order; host-only tools skip the GPU
    size: str  # "small" or "paper"
    devices: tuple[str, ...]  # "cpu" and/or "cuda"
    runs: int  # timed calls per job (median)
    warmup: int  # untimed calls first
    seed: int  # seed of weights and inputs
    busy: str  # busy policy: warn, wait, ignore
    max_busy_pct: float  # CPU use by others counted as busy (0-100)
    max_wait_s: float  # with busy="wait": longest wait per tool


def plan_profile(
    tools: str | list[str] = "all",
    devices: str = "cpu",
    *,
    size: str = "small",
    runs: int = 30,
    warmup: int = 2,
    seed: int = 0,
    busy: str = "warn",
    max_busy_pct: float = 30.0,
    max_wait_s: float = 120.0,
) -> ProfilePlan:
    """Validate a profiler request without measuring anything (one-line ProfileError otherwise)."""
    from agentsched.model.tool import is_tool_path, tool_class
    from agentsched.tools import get_tool, parse_size, tools_installed

    user_only = isinstance(tools, (str, list)) and all(
        is_tool_path(n) for n in (tools.split(",") if isinstance(tools, str) else tools) if str(n).strip()
    )
    if not user_only and not tools_installed():
        raise ProfileError("the profiler needs the tools extra: pip install 'agentsched[tools]'")
    if runs < 1 or warmup < 0:
        raise ProfileError(f"need runs >= 1 and warmup >= 0 (got runs={runs}, warmup={warmup})")
    if busy not in BUSY_POLICIES:
        raise ProfileError(f"unknown busy policy {busy!r} (valid: {', '.join(BUSY_POLICIES)})")
    if not (math.isfinite(max_busy_pct) and 0 <= max_busy_pct <= 100):
        raise ProfileError(f"max busy percent must be a number in [0, 100], got {max_busy_pct:g}")
    if not (math.isfinite(max_wait_s) and max_wait_s >= 0):
        raise ProfileError(f"max wait must be a finite number of seconds >= 0, got {max_wait_s:g}")
    size = parse_size(size).value
    names = resolve_tools(tools)
    devs = resolve_devices(devices)
    from agentsched.model.tool import Tool

    for n in names:
        if is_tool_path(n) and tool_class(n).example_inputs is Tool.example_inputs:
            raise ProfileError(
                f"tool {n} defines no example_inputs() (a dict of the inputs run() takes): "
                "the profiler has nothing to time it on"
            )

    def has_gpu(n: str) -> bool:
        return tool_class(n).has_gpu if is_tool_path(n) else get_tool(n, size).has_gpu

    jobs = tuple((n, d) for n in names for d in devs if d == "cpu" or has_gpu(n))  # host-only tools have no GPU figure
    return ProfilePlan(
        jobs=jobs,
        size=size,
        devices=tuple(devs),
        runs=runs,
        warmup=warmup,
        seed=seed,
        busy=busy,
        max_busy_pct=float(max_busy_pct),
        max_wait_s=float(max_wait_s),
    )


@dataclass
class ProfileRun:
    """Everything one profiler run measured."""

    measurements: list[Measurement]  # per (tool, device), in run order
    machine: dict[str, Any]  # machine_info() at the start
    loadavg_end: list[float] | None  # load average at the end
    settings: dict[str, Any]  # size, runs, warmup, seed, devices, busy policy


def profile(
    tools: str | list[str] = "all",
    devices: str = "cpu",
    *,
    size: str = "small",
    runs: int = 30,
    warmup: int = 2,
    seed: int = 0,
    busy: str = "warn",
    max_busy_pct: float = 30.0,
    max_wait_s: float = 120.0,
    on_step: Callable[[str, int, int], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> ProfileRun:
    """Measure every (tool, device). ``on_step(label, done, total)`` reports progress."""
    plan = plan_profile(
        tools,
        devices,
        size=size,
        runs=runs,
        warmup=warmup,
        seed=seed,
        busy=busy,
        max_busy_pct=max_busy_pct,
        max_wait_s=max_wait_s,
    )
    return run_plan(plan, on_step=on_step, say=say)


def run_plan(
    plan: ProfilePlan,
    *,
    on_step: Callable[[str, int, int], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> ProfileRun:
    """Measure a validated plan. ``on_step(label, done, total)`` reports progress."""
    say = say or (lambda msg: None)
    jobs, size, runs, warmup, seed = plan.jobs, plan.size, plan.runs, plan.warmup, plan.seed
    busy, max_busy_pct, max_wait_s = plan.busy, plan.max_busy_pct, plan.max_wait_s
    machine = machine_info()
    _warm_imports()
    out: list[Measurement] = []
    for i, (n, d) in enumerate(jobs):
        if on_step:
            on_step(f"{n} on {d}", i, len(jobs))
        busy_pct = wait_until_quiet(max_busy_pct, busy, max_wait_s, say)
        out.append(measure(n, d, size, runs=runs, warmup=warmup, seed=seed, busy_pct=busy_pct))
        if out[-1].spread > 3.0:
            say(f"warning: {n} on {d}: calls varied {out[-1].spread:.1f}x (disturbed measurement?)")
    if on_step:
        on_step("done", len(jobs), len(jobs))
    return ProfileRun(
        measurements=out,
        machine=machine,
        loadavg_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        settings={
            "size": size,
            "runs": runs,
            "warmup": warmup,
            "seed": seed,
            "devices": list(plan.devices),
            "busy_policy": busy,
            "max_busy_pct": max_busy_pct,
        },
    )


# ---- cards -------------------------------------------------------------------------------------
def build_card_set(run: ProfileRun, name: str, *, base: CardSet | None = None, reference: str = "a5500") -> CardSet:
    """Cards from a run: cpu_ms from the CPU; gpu_ms, load_ms, vram_mb from the GPU.

    ``base`` (an earlier card file of this machine) supplies what this run did not measure, e.g.
    cpu_ms when only the GPU was profiled. Workload strings and tags come from ``reference``.
    """
    from agentsched.model.tool import is_tool_path, tool_class

    ref = load_card_set(reference)
    by_tool: dict[str, dict[str, Measurement]] = {}
    for m in run.measurements:
        by_tool.setdefault(m.tool, {})[m.device] = m
    cards: dict[str, ToolCard] = dict(base.cards) if base is not None else {}
    for tool, ms in by_tool.items():
        old = cards.get(tool)
        fields: dict[str, Any] = old.model_dump() if old is not None else {"name": tool}
        if old is None and is_tool_path(tool):  # a user tool describes itself
            cls = tool_class(tool)
            fields.update(workload=cls.workload, tags=tuple(cls.tags))
        elif old is None:
            try:
                r = ref.resolve(tool)
                fields.update(workload=r.workload, tags=r.tags)
            except AgentschedError:
                pass
        if "cpu" in ms:
            fields["cpu_ms"] = round(ms["cpu"].call_ms, 4)
        if "cuda" in ms:
            g = ms["cuda"]
            fields.update(gpu_ms=round(g.call_ms, 4), load_ms=round(g.load_ms, 3), vram_mb=round(g.vram_mb or 0.0, 2))
        if "cpu_ms" not in fields:
            raise ProfileError(
                f"{tool}: no CPU latency (profile with --device all, or merge into a card file that has it)"
            )
        cards[tool] = ToolCard.model_validate(fields)
    machine = dict(run.machine)
    machine["loadavg_end"] = run.loadavg_end
    machine["profile"] = {
        **run.settings,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "measurements": [
            {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(m).items() if k != "calls_ms"}
            | {"spread": round(m.spread, 3)}
            for m in run.measurements
        ],
    }
    src = f"agentsched profile --size {run.settings['size']} --runs {run.settings['runs']} on {machine.get('cpu')}" + (
        f" + {machine['gpu']}" if machine.get("gpu") else ""
    )
    return CardSet(name=name, source=src, machine=machine, cards=cards)
