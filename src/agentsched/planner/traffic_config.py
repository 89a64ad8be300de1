"""The traffic-aware decider's tuned numbers (``traffic.TrafficPlanner``), in one validated object.

A ``TrafficConfig`` is a constructor parameter of the decider (``TrafficPlanner(config=...)``,
``loop/registry.decider_by_name("traffic-aware", config=...)``): each value is checked here, once.
The defaults were chosen on streams that the load benchmark (``benchmarks/load_targets.py``, arrival
seeds 0-2) never uses, so that its figures are not fitted to it; the results are flat around them
(the streams and the sweeps: docs/results/load-tuning.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TrafficConfig(BaseModel):
    """The traffic-aware decider's tuned constants (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    cpu_harm_weight: float = Field(
        1.0, ge=0, description="the delay a CPU run inflicts on the CPU queue, counted this many times (cpu_harm_ms)"
    )
    door_harm_weight: float = Field(
        1.0,
        ge=0,
        description="the delay a hold for VRAM inflicts on the invocations "
        "at the door, counted this many times (door_harm_ms)",
    )
    harm_weight: float = Field(
        2.0,
        ge=0,
        description="the delay inflicted on running GPU tasks counts this many times (it delays other invocations)",
    )
    admit_slowdown: float = Field(
        2.0, ge=1, description="admission holds new invocations when a GPU start would run this much slower"
    )
    late_fraction: float = Field(
        0.25, ge=0, le=1, description="a running task past its predicted end: this share of that prediction remains"
    )
    max_held: int = Field(
        64, ge=0, description="more tasks waiting for the GPU is a queue: new ones take the best start now"
    )
    max_hold_factor: float = Field(
        1.0, ge=0, description="a task is held at most this many times its own GPU time, then starts"
    )
    hold_margin: float = Field(
        0.4,
        gt=0,
        le=1,
        description="a hold while its VRAM fits (to thin the crowd): only "
        "when its cost is this share of the best start now (0.4: 2.5x better)",
    )
    vram_hold_margin: float = Field(
        0.7,
        gt=0,
        le=1,
        description="a hold for VRAM: its predicted finish, stretched by 1 / this (uncertain), must still win",
    )
    background_share: float = Field(
        1.0, ge=0, description="of the time-averaged GPU pressure, the share a new run meets at least"
    )
    pressure_tau_ms: float = Field(30_000.0, gt=0, description="time constant of that average")
    door_tau_ms: float = Field(
        300_000.0,
        gt=0,
        description="time constant of the door's average (door_harm_ms): a backlog of minutes, not a burst",
    )
    slack_tie: float = Field(
        0.1, ge=0, description="a task's own finish, weighed beside its invocation's end (traffic_slack.py)"
    )


DEFAULT_CONFIG = TrafficConfig()
