"""The planner's tuned numbers, in one validated place (``PlanConfig``).

``agent-plan`` takes them as its ``config`` option: ``make_policy("agent-plan", config={"failure_budget": 0.02})``
or ``--policy-option 'config={"failure_budget": 0.02}'``; a bad field is a one-line ``PolicyError``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentsched.errors import PolicyError, validation_line


class PlanConfig(BaseModel):
    """What the planner risks, forgives and searches (defaults: the values its benchmarks were tuned with)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # a mapping more likely than this to run out of memory is no candidate for a round (a probe may still test it)
    max_oom_risk: float = Field(default=0.5, gt=0, lt=1)
    # a predicted-infeasible or risky mapping is a probe candidate up to this risk
    max_probe_risk: float = Field(default=0.95, gt=0, lt=1)
    # failed executions the planner may spend on risky probes, as a share of the run's executions
    failure_budget: float = Field(default=0.01, ge=0, le=1)
    # a measured mapping's failure rate: (failures + w * predicted risk) / (runs + failures + w), w this
    risk_prior_runs: float = Field(default=4.0, gt=0, le=1000)
    oom_cost: float = Field(default=2.0, ge=0, le=100)  # a failed run costs this many runs beyond its retry
    conflict_risk: float = Field(default=0.3, ge=0, lt=1)  # least risk of a mapping repeating an OOM conflict
    # a conflict's weight halves after this many clean executions of mappings that repeat it
    conflict_half_runs: float = Field(default=3.0, gt=0, le=1000)
    conflict_min_weight: float = Field(default=0.1, ge=0, le=1)  # below it a conflict is forgotten
    confirm_probes: int = Field(default=2, ge=0, le=10)  # probes of an unmeasured choice before a round runs it
    change_widen: float = Field(default=2.0, ge=1, le=10)  # uncertainty multiplier right after a detected change
    widen_decay: float = Field(default=0.8, gt=0, le=1)  # per round, back towards 1
    drift: float = Field(default=0.02, ge=0, le=1)  # largest log-parameter move under which candidates are re-scored
    restart_every: int = Field(
        default=3, ge=1, le=1000
    )  # large workflows: heuristic restarts every this many decisions


def plan_config(value: Any) -> PlanConfig:
    """A ``PlanConfig`` from itself, a mapping of its fields or None (the defaults); one-line PolicyError otherwise."""
    if value is None:
        return PlanConfig()
    if isinstance(value, PlanConfig):
        return value
    if not isinstance(value, dict):
        raise PolicyError(f"agent-plan: config must be a mapping of PlanConfig fields, got {value!r}")
    try:
        return PlanConfig.model_validate(value)
    except ValidationError as e:
        raise PolicyError(f"agent-plan: config: {validation_line(e.errors(), 'config')}") from None
