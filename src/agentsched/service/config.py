"""What ``agentsched serve`` was asked to serve, and how: every value checked once, here.

``ServiceConfig`` is a frozen pydantic model. A refused value is a ``ServiceConfigError`` that
names its field (``error.field``) and says what is wrong (``error.problem``); the CLI names the
field by its flag from that (``cli/serve_cmd.py``), never by reading the message.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentsched.errors import FieldError
from agentsched.loop.registry import DECIDER_ALIASES
from agentsched.model.budget import VramBudgetMb
from agentsched.service.deciders import DECIDER_NAMES
from agentsched.testbeds.spec import TestbedKind, TestbedSpec

MB = 1024 * 1024


class ServiceConfigError(FieldError):
    """A ``ServiceConfig`` value refused (its field named)."""


class Placement(str, enum.Enum):
    """How an invocation is placed."""

    POLICY = "policy"  # the workflow's policy chooses a mapping per invocation
    LIVE = "live"  # every task placed when it becomes ready, over the machine's live state

    def __str__(self) -> str:
        return self.value


DEFAULT_DECIDER = DECIDER_NAMES[0]  # the per-ready-task decider of live placement (service/deciders.py)


class ServiceConfig(BaseModel):
    """What ``agentsched serve`` was asked to serve, and how (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, strict=False)

    workflows: tuple[str, ...] = Field(min_length=1, description="workflow files, folders of them, or scenario names")
    store: Path
    testbed: TestbedSpec = Field(default_factory=TestbedSpec)
    realtime: bool = Field(False, strict=True, description="sim only: tools sleep their simulated durations")
    time_scale: float = Field(1.0, gt=0, allow_inf_nan=False, description="realtime: simulated ms per wall ms")
    vram_budget_mb: VramBudgetMb | None = Field(None, description="realtime: the shared GPU's budget")
    policy: str | None = None  # None: each workflow's default (agent-plan / agent-plan-cold)
    placement: Placement = Placement.POLICY
    decider: str = Field(DEFAULT_DECIDER, min_length=1, description="live placement's decider, by name")
    round_size: int = Field(5, ge=1, strict=True)
    explore_fraction: float = Field(0.1, ge=0, le=1, allow_inf_nan=False)
    seed: int = Field(0, strict=True)
    cards: str | None = None
    max_concurrency: int = Field(64, ge=1, le=100_000, strict=True, description="invocations accepted at once")
    drain_s: float = Field(30.0, ge=0, allow_inf_nan=False, description="SIGTERM: how long in-flight ones may take")
    # the edge: a request body's cap, and the caps of what an invocation answers and a history holds
    max_body_mb: float = Field(4.0, gt=0, le=1024, allow_inf_nan=False, description="a request body's cap")
    max_output_mb: float = Field(8.0, gt=0, le=4096, allow_inf_nan=False, description="an answer's outputs' cap")
    max_message_chars: int = Field(4096, ge=80, le=10_000_000, strict=True, description="an error text's cap")
    # the connections: at most this many open at once (more are closed at once with a 503), and a
    # request's head (request line and headers) must arrive within header_timeout_s (slow clients)
    max_connections: int = Field(1000, ge=1, le=1_000_000, strict=True, description="open connections at once")
    header_timeout_s: float = Field(10.0, gt=0, le=3600, allow_inf_nan=False, description="a request head's time")
    keep_alive_s: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False, description="an idle connection's time")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise ServiceConfigError.from_validation(e.errors()) from None

    @field_validator("decider")
    @classmethod
    def _known_decider(cls, name: str) -> str:
        if DECIDER_ALIASES.get(name, name) not in DECIDER_NAMES:
            raise ServiceConfigError("decider", f"is unknown: {name!r} (valid: {', '.join(DECIDER_NAMES)})")
        return name

    @model_validator(mode="after")
    def _rules_between_fields(self) -> ServiceConfig:
        if self.realtime and not self.testbed.simulated:
            raise ServiceConfigError("realtime", "applies only to the sim testbed")
        if self.placement is Placement.LIVE and not (self.realtime or self.testbed.kind is TestbedKind.LOCAL):
            raise ServiceConfigError(
                "placement",
                "live needs the local testbed or the real-time simulator (a "
                "machine whose live state it reads); other testbeds place by policy",
            )
        if not self.realtime and self.time_scale != 1.0:
            raise ServiceConfigError("time_scale", "applies only to the real-time simulator (sim, realtime)")
        if not self.realtime and self.vram_budget_mb is not None:
            raise ServiceConfigError("vram_budget_mb", "applies only to the real-time simulator (sim, realtime)")
        return self

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * MB)

    @property
    def max_output_bytes(self) -> int:
        return int(self.max_output_mb * MB)
