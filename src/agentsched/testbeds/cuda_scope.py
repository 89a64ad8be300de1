"""Process-wide torch state of the local testbed's runs, which may overlap: torch's intra-op
threads, the CUDA memory ceiling, per-task streams, the measured peak."""

from __future__ import annotations

import threading
from typing import Any

_threads_lock = threading.Lock()
_threads_users = 0  # runs in progress that set torch's threads
_threads_before = 0  # torch's threads before the first of them


def torch_threads_enter(threads: int) -> None:
    """Set torch's intra-op threads for a run (process-wide: overlapping runs share the setting;
    the last one to end restores what was there before the first)."""
    import torch

    global _threads_users, _threads_before
    with _threads_lock:
        if _threads_users == 0:
            _threads_before = torch.get_num_threads()
        _threads_users += 1
        torch.set_num_threads(threads)


def torch_threads_exit() -> None:
    import torch

    global _threads_users
    with _threads_lock:
        _threads_users -= 1
        if _threads_users == 0:
            torch.set_num_threads(_threads_before)


class NullStream:
    """Host tasks: no stream; ``sync`` is the tool's own (a no-op on the CPU)."""

    def __enter__(self) -> NullStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sync(self, tool: Any) -> None:
        tool.sync()


class CudaScope:
    """Per-run CUDA state: the process's memory ceiling while any run is in progress, streams, the
    measured peak. Runs may overlap: the ceiling is the largest budget of the runs in progress
    (none when one of them has none), and the peak is the process's over the run."""

    _lock = threading.Lock()
    _active: list[float | None] = []  # budgets of the runs in progress, process-wide

    def __init__(self, device: str, budget_mb: float | None) -> None:
        self.device = device  # e.g. "cuda" or "cuda:1"
        self.budget_mb = budget_mb  # ceiling on allocated memory (None: no ceiling)
        self.base_bytes = 0  # allocated when the run started (resident models)

    def enter(self) -> None:
        import torch

        with CudaScope._lock:
            first = not CudaScope._active
            CudaScope._active.append(self.budget_mb)
            torch.cuda.synchronize(self.device)
            if first:
                torch.cuda.empty_cache()  # the ceiling counts reserved memory: drop cached blocks first
                torch.cuda.reset_peak_memory_stats(self.device)
            self.base_bytes = torch.cuda.memory_allocated(self.device)
            self._set_ceiling(torch)

    def _set_ceiling(self, torch: Any) -> None:
        """Cap this process's CUDA memory at the budget (resident pooled models count in it)."""
        budgets = CudaScope._active
        if not budgets or any(b is None for b in budgets):
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)
            return
        total = torch.cuda.get_device_properties(self.device).total_memory
        top = max(b for b in budgets if b is not None)
        torch.cuda.set_per_process_memory_fraction(min(1.0, top * 2**20 / total), self.device)

    def exit(self) -> float:
        """Restore the ceiling, free cached blocks; return the peak allocated above the start (MB)."""
        import torch

        with CudaScope._lock:
            torch.cuda.synchronize(self.device)
            peak = (torch.cuda.max_memory_allocated(self.device) - self.base_bytes) / 2**20
            CudaScope._active.remove(self.budget_mb)
            self._set_ceiling(torch)
            if not CudaScope._active:
                torch.cuda.empty_cache()
        return max(peak, 0.0)

    def stream(self) -> CudaStream:
        return CudaStream(self.device)


class CudaStream:
    """A task's own CUDA stream, so concurrent gpu_now tasks overlap; ``sync`` waits for it only."""

    def __init__(self, device: str) -> None:
        import torch

        self.stream = torch.cuda.Stream(device=device)  # this task's stream
        self._ctx = torch.cuda.stream(self.stream)

    def __enter__(self) -> CudaStream:
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.synchronize()
        self._ctx.__exit__(*exc)

    def sync(self, tool: Any) -> None:
        if tool.device is not None and tool.device.startswith("cuda"):
            self.stream.synchronize()
