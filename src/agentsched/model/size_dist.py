"""Distributions of input sizes: what a simulated stream of invocations draws each invocation's sizes from.

A workflow's ``SizePlan`` gives each workflow input a distribution (``log-normal``, heavy-tailed
``pareto``, or a ``trace`` of recorded sizes replayed in order) and says which input each task's size
follows, times a factor (a task that reads every second page of the PDF follows ``pdf`` with factor 0.5).
``SizePlan.draw(rng)`` gives one invocation's size per task; randomness comes from the caller's
``random.Random`` (seeded), never a global one. A task the plan does not name has no size (its card's
constants apply).
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentsched.model.curves import MAX_SIZE

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class LogNormalSizes(BaseModel):
    """Sizes whose logarithm is normal: ``median`` and ``sigma`` (of the log; 1.0 spans ~50x in 95%)."""

    model_config = _FROZEN
    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0, le=MAX_SIZE)
    sigma: float = Field(ge=0, le=5)
    max: float | None = Field(default=None, gt=0, le=MAX_SIZE)  # a cap (an input limit); None: MAX_SIZE

    def draw(self, rng: random.Random) -> float:
        return min(self.median * math.exp(rng.gauss(0.0, self.sigma)), self.max or MAX_SIZE)


class ParetoSizes(BaseModel):
    """Heavy-tailed sizes: Pareto with scale ``minimum`` (the smallest size) and tail index ``alpha``
    (below 2 the variance is infinite; ``max`` caps a draw, as an input limit would)."""

    model_config = _FROZEN
    kind: Literal["pareto"] = "pareto"
    minimum: float = Field(gt=0, le=MAX_SIZE)
    alpha: float = Field(gt=0, le=10)
    max: float | None = Field(default=None, gt=0, le=MAX_SIZE)

    def draw(self, rng: random.Random) -> float:
        u = 1.0 - rng.random()  # in (0, 1]
        return min(self.minimum * u ** (-1.0 / self.alpha), self.max or MAX_SIZE)


class TraceSizes(BaseModel):
    """Recorded sizes, replayed in order and from the start again (``shuffle``: drawn at random instead)."""

    model_config = _FROZEN
    kind: Literal["trace"] = "trace"
    sizes: tuple[float, ...] = Field(min_length=1, max_length=1_000_000)
    shuffle: bool = False

    @model_validator(mode="after")
    def _in_range(self) -> TraceSizes:
        bad = next((s for s in self.sizes if not 0 <= s <= MAX_SIZE), None)
        if bad is not None:
            raise ValueError(f"trace size {bad:g} outside [0, {MAX_SIZE:g}]")
        return self

    def draw(self, rng: random.Random, index: int = 0) -> float:
        return self.sizes[rng.randrange(len(self.sizes))] if self.shuffle else self.sizes[index % len(self.sizes)]


SizeDistribution = Annotated[LogNormalSizes | ParetoSizes | TraceSizes, Field(discriminator="kind")]


class TaskSize(BaseModel):
    """A task's size: the size drawn for workflow input ``input``, times ``factor``."""

    model_config = _FROZEN
    input: str = Field(min_length=1)
    factor: float = Field(default=1.0, gt=0, le=1e6)


class SizePlan(BaseModel):
    """Per workflow input a distribution, and per task which input its size follows."""

    model_config = _FROZEN
    inputs: dict[str, SizeDistribution] = Field(min_length=1)
    tasks: dict[str, TaskSize] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _inputs_known(self) -> SizePlan:
        for task, ts in self.tasks.items():
            if ts.input not in self.inputs:
                raise ValueError(
                    f"task {task!r} follows input {ts.input!r}, which has no distribution "
                    f"(inputs: {', '.join(sorted(self.inputs))})"
                )
        return self

    def draw_inputs(self, rng: random.Random, index: int = 0) -> dict[str, float]:
        """One invocation's size per workflow input (``index``: the invocation's number, for traces)."""
        out = {}
        for name in sorted(self.inputs):  # a fixed order: the same seed draws the same sizes
            dist = self.inputs[name]
            out[name] = dist.draw(rng, index) if isinstance(dist, TraceSizes) else dist.draw(rng)
        return out

    def draw(self, rng: random.Random, index: int = 0) -> dict[str, float]:
        """One invocation's size per task the plan names."""
        sizes = self.draw_inputs(rng, index)
        return {task: min(sizes[ts.input] * ts.factor, MAX_SIZE) for task, ts in self.tasks.items()}
