"""The host the profiler measures on: its description for the card file, and how busy other
processes keep it (a busy host inflates every latency, so the profiler waits or warns)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} elsewhere)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                fields[k.strip()] = v.strip()
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """e.g. 'AMD EPYC (family 25 model 17)': virtual machines often hide the exact part name."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']} model {info['model']})"
    return name


def machine_info() -> dict[str, Any]:
    """CPU, GPU, memory, library versions and the load average, for the card file."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import psutil

        info["ram_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = props.name
            info["gpu_mem_mb"] = round(props.total_memory / 2**20)
            info["cuda"] = torch.version.cuda
        else:
            info["gpu"] = None
    except ImportError:
        pass
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    info["loadavg"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return info


def others_cpu_pct(interval_s: float = 0.5) -> float:
    """System-wide CPU use (0-100) over ``interval_s`` while this process sleeps: the others' load."""
    try:
        import psutil
    except ImportError:  # fall back on the load average per core
        return min(100.0, 100.0 * os.getloadavg()[0] / (os.cpu_count() or 1))
    return float(psutil.cpu_percent(interval=interval_s))


def wait_until_quiet(max_busy_pct: float, policy: str, max_wait_s: float, say: Callable[[str], None]) -> float:
    """Sample others' CPU use; under ``wait`` poll until it drops (or time runs out). Returns it."""
    if policy == "ignore":
        return 0.0
    busy = others_cpu_pct()
    if busy <= max_busy_pct:
        return busy
    if policy == "wait":
        deadline = time.monotonic() + max_wait_s
        say(f"machine busy ({busy:.0f}% CPU used by others): waiting up to {max_wait_s:.0f} s")
        while busy > max_busy_pct and time.monotonic() < deadline:
            time.sleep(2.0)
            busy = others_cpu_pct(1.0)
        if busy <= max_busy_pct:
            return busy
    say(f"warning: machine busy ({busy:.0f}% CPU used by other processes): latencies will be inflated")
    return busy
