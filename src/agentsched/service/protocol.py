"""The service's request and response models (the OpenAPI document's schemas).

Mappings are typed by ``Mode``: a mode outside ``cpu | gpu_now | gpu_queue`` is refused where the
body is read. An invocation's outputs and message are bounded before they are answered
(``bounded.py``): a value cut or replaced is marked in place, and ``cut`` lists where.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode


class InvocationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt "inputs" must not run with none

    inputs: dict[str, Any] = Field(
        default_factory=dict, description="argument name -> value, given to every source task"
    )


class MappingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mapping: dict[str, Mode] = Field(..., description="task id -> cpu | gpu_now | gpu_queue (every task)")


class InvocationResponse(BaseModel):
    invocation_id: int | None = Field(description="its id in the store (null: not recorded)")
    status: Status
    outputs: dict[str, Any] = Field(description="sink task id -> its output (bounded; see cut)")
    mapping: dict[str, Mode]
    e2e_ms: float | None
    timeline: list[dict[str, Any]]
    message: str = Field(description="the one-line error, bounded ('' when ok)")
    kind: str = Field(description="round, probe, pinned, live or cut")
    round: int | None
    cut: list[str] = Field(default_factory=list, description="where a value was cut or replaced, and why")


class WorkflowView(BaseModel):
    name: str
    policy: str
    tasks: list[str]
    pinned: bool
    current_mapping: dict[str, Mode] | None = Field(
        description="null under live placement: each task placed when ready"
    )
    best_mapping: dict[str, Mode] | None
    best_e2e_ms: float | None
    invocations: int
    replayed: int
    placement: str = Field(description="policy, live or pinned")
    host_only: bool = Field(description="no CUDA here: every GPU placement runs as host code on the CPU")
    learner: int | None


class MappingView(BaseModel):
    name: str
    pinned: bool
    current_mapping: dict[str, Mode] | None
    best_mapping: dict[str, Mode] | None
    best_e2e_ms: float | None


class HistoryRow(BaseModel):
    invocation_id: int
    seq: int | None
    kind: str
    round: int | None
    mapping: dict[str, Any] | None
    status: str
    e2e_ms: float | None
    message: str | None = Field(description="bounded as an invocation's is")


class Health(BaseModel):
    status: str = Field(description="ok, or draining")
    workflows: int
    in_flight: int
    time_scale: float = Field(description="simulated ms per wall ms (1 unless realtime): a load generator adopts it")


class ErrorResponse(BaseModel):
    detail: str = Field(description="one line")
