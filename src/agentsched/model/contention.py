"""GPU-utilisation contention (the paper's Factor A) as pure functions.

Model: while a set R of GPU tasks runs, task i progresses at

    rate_i = 1 / (1 + s_i * sum_{j in R, j != i} p_j)

of its isolated speed, piecewise constant between events. ``s_i`` (sensitivity) says how much a
tool suffers from others; ``p_j`` (pressure) how much GPU time/bandwidth it takes from others.
Compute-bound kernels that fill the SMs press hard; memory-bound tools (vector search, resize,
scatter-add) are both sensitive and pressing through DRAM bandwidth. A task loading its model
(queue load-in, a PCIe copy) neither presses nor suffers. Parameters live in the simulated world
(``world.py``, per tool with defaults by tag), never on the tool cards that schedulers see.
"""

from __future__ import annotations

from collections.abc import Sequence


def gpu_rates(sensitivity: Sequence[float], pressure: Sequence[float]) -> list[float]:
    """Progress rate (isolated = 1) of each GPU task running together."""
    total = sum(pressure)
    return [1.0 / (1.0 + s * (total - p)) for s, p in zip(sensitivity, pressure, strict=True)]


def slowdown(sensitivity: float, others_pressure: Sequence[float]) -> float:
    """Latency multiplier of a task that runs its whole life beside a fixed set of others."""
    return 1.0 + sensitivity * sum(others_pressure)
