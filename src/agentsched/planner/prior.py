"""The planner's prior on GPU contention, by semantic tag: its own guesses, written here from what
the tags mean, never read from the testbed's world (which the planner cannot see).

Each entry is (sensitivity, pressure) of the contention law in ``model/contention.py``; the
prior is log-normal around it with ``PRIOR_LOG_SIGMA`` (a factor ~3.3 at one sigma), wide enough
for a world whose contention differs by a factor of 3 either way, narrow enough that two or three
overlapped runs already move the estimate.
"""

from __future__ import annotations

from collections.abc import Iterable

# why these values: dense kernels fill the SMs (moderate pressure, moderate suffering); memory-bound
# tools fight for DRAM bandwidth (suffer most, press noticeably); light/io tools barely use the GPU.
PRIOR_BY_TAG: dict[str, tuple[float, float]] = {
    "memory-bound": (1.0, 0.6),
    "compute-bound": (0.4, 0.5),
    "compute-light": (0.25, 0.1),
    "io-bound": (0.1, 0.05),
}
PRIOR_DEFAULT: tuple[float, float] = (0.5, 0.4)
PRIOR_LOG_SIGMA = 1.2  # std of log sensitivity and log pressure under the prior

# latency scale: how far a warm-start card may be off (log std); cold start knows no latency
CARD_LOG_SIGMA = 0.15
COLD_LOG_SIGMA = 4.0

# cold start: GPU speedup (cpu_ms / gpu_ms) assumed by tag before any GPU run is seen
SPEEDUP_BY_TAG: dict[str, float] = {"compute-bound": 20.0, "memory-bound": 2.0, "compute-light": 1.5}
SPEEDUP_DEFAULT = 2.0


def contention_prior(tags: Iterable[str]) -> tuple[float, float]:
    """(sensitivity, pressure) prior median for a tool with ``tags``: the first known tag wins."""
    for tag in tags:
        if tag in PRIOR_BY_TAG:
            return PRIOR_BY_TAG[tag]
    return PRIOR_DEFAULT


def speedup_prior(tags: Iterable[str]) -> float:
    """Cold start: the GPU speedup assumed for a tool with ``tags`` until a GPU run is seen."""
    for tag in tags:
        if tag in SPEEDUP_BY_TAG:
            return SPEEDUP_BY_TAG[tag]
    return SPEEDUP_DEFAULT


def host_only(tags: Iterable[str]) -> bool:
    """Cold start: a tool tagged ``no-gpu`` has no GPU implementation."""
    return "no-gpu" in set(tags)
