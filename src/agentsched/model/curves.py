"""Cost curves: a tool's CPU time, GPU time or VRAM as a function of the size of one invocation's inputs.

A curve is one of four kinds, written in a card as an object with a ``kind``:

* ``{"kind": "constant", "value": V}``: V at every size (what a card without curves means);
* ``{"kind": "linear", "fixed": F, "per_unit": S}``: F + S * n, a fixed cost plus a per-unit slope;
* ``{"kind": "power", "a": A, "b": B, "c": C}``: A * n**B + C, StarPU's non-linear regression form;
* ``{"kind": "points", "points": [[n1, v1], [n2, v2], ...]}``: measured points, interpolated piecewise
  linearly in log-log space (a power law between neighbours; beyond the ends, the end segment's power law).

``n`` is the size in the tool's size unit (``ToolCard.curves.unit``); a size below 0 counts as 0. Values
are never negative and never above ``MAX_VALUE``. ``CardCurves`` groups a card's curves.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_VALUE = 1e9  # the cards' bound on one figure (ms or MB); a curve never evaluates above it
MAX_SIZE = 1e15  # sizes beyond it are typos (a byte count of a petabyte input)
MAX_EXPONENT = 4.0  # b of a*n**b+c: beyond n**4, a tool's cost is not a curve worth fitting

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _size(n: float) -> float:
    """A size as curves read it: not below 0, not above MAX_SIZE; NaN counts as 0."""
    return min(max(float(n), 0.0), MAX_SIZE) if n == n else 0.0


def _bounded(v: float) -> float:
    return min(max(v, 0.0), MAX_VALUE)


class ConstantCurve(BaseModel):
    """The same value at every size."""

    model_config = _FROZEN
    kind: Literal["constant"] = "constant"
    value: float = Field(ge=0, le=MAX_VALUE)

    def at(self, n: float) -> float:
        return self.value

    def scaled(self, k: float) -> ConstantCurve:
        return ConstantCurve(value=_bounded(self.value * k))


class LinearCurve(BaseModel):
    """fixed + per_unit * n: e.g. a GPU's launch and transfer cost plus its per-unit slope."""

    model_config = _FROZEN
    kind: Literal["linear"] = "linear"
    fixed: float = Field(ge=0, le=MAX_VALUE)
    per_unit: float = Field(ge=0, le=MAX_VALUE)

    def at(self, n: float) -> float:
        return _bounded(self.fixed + self.per_unit * _size(n))

    def scaled(self, k: float) -> LinearCurve:
        return LinearCurve(fixed=_bounded(self.fixed * k), per_unit=_bounded(self.per_unit * k))


class PowerCurve(BaseModel):
    """a * n**b + c (StarPU's non-linear regression model)."""

    model_config = _FROZEN
    kind: Literal["power"] = "power"
    a: float = Field(ge=0, le=MAX_VALUE)
    b: float = Field(gt=0, le=MAX_EXPONENT)
    c: float = Field(ge=0, le=MAX_VALUE)

    def at(self, n: float) -> float:
        x = _size(n)
        if x == 0.0:
            return _bounded(self.c)
        # log first: a * n**b overflows a float for large n and b before the bound applies
        log_term = math.log(self.a) + self.b * math.log(x) if self.a > 0 else -math.inf
        term = MAX_VALUE if log_term > math.log(MAX_VALUE) else math.exp(log_term)
        return _bounded(term + self.c)

    def scaled(self, k: float) -> PowerCurve:
        return PowerCurve(a=_bounded(self.a * k), b=self.b, c=_bounded(self.c * k))


class PointsCurve(BaseModel):
    """Measured (size, value) points, interpolated in log-log space; sizes strictly increasing, all > 0."""

    model_config = _FROZEN
    kind: Literal["points"] = "points"
    points: tuple[tuple[float, float], ...] = Field(min_length=2, max_length=1000)

    @field_validator("points")
    @classmethod
    def _increasing_positive(cls, v: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        for n, value in v:
            if not (0 < n <= MAX_SIZE) or not (0 < value <= MAX_VALUE):
                raise ValueError(
                    f"point ({n:g}, {value:g}): sizes in (0, {MAX_SIZE:g}] and values in "
                    f"(0, {MAX_VALUE:g}] (log-log interpolation needs both above 0)"
                )
        if any(b[0] <= a[0] for a, b in zip(v, v[1:], strict=False)):
            raise ValueError("point sizes must be strictly increasing")
        return v

    def at(self, n: float) -> float:
        pts = self.points
        x = max(_size(n), pts[0][0] * 1e-9)  # log of 0: read a tiny size as the first segment's extension
        i = 0
        while i < len(pts) - 2 and x > pts[i + 1][0]:
            i += 1
        (n0, v0), (n1, v1) = pts[i], pts[i + 1]
        slope = math.log(v1 / v0) / math.log(n1 / n0)
        log_v = math.log(v0) + slope * (math.log(x) - math.log(n0))
        return MAX_VALUE if log_v > math.log(MAX_VALUE) else _bounded(math.exp(log_v))

    def scaled(self, k: float) -> PointsCurve:
        return PointsCurve(points=tuple((n, min(max(v * k, 1e-12), MAX_VALUE)) for n, v in self.points))


Curve = Annotated[ConstantCurve | LinearCurve | PowerCurve | PointsCurve, Field(discriminator="kind")]


class CardCurves(BaseModel):
    """A card's figures as curves of the invocation's size. A figure without a curve stays the card's constant."""

    model_config = _FROZEN
    unit: str = Field(min_length=1, max_length=40)  # e.g. sentences, audio_s, pages, tokens, pixels, bytes
    ref_size: float | None = Field(default=None, ge=0, le=MAX_SIZE)  # the size the card's constants were measured at
    cpu_ms: Curve | None = None
    gpu_ms: Curve | None = None
    vram_mb: Curve | None = None
    # median relative error of each fitted curve on the measured points (informative; the profiler writes it)
    fit_error: dict[Literal["cpu_ms", "gpu_ms", "vram_mb"], float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _some_curve(self) -> CardCurves:
        if self.cpu_ms is None and self.gpu_ms is None and self.vram_mb is None:
            raise ValueError("curves give none of cpu_ms, gpu_ms, vram_mb (leave 'curves' out for a constant card)")
        return self

    def scaled(self, k: float) -> CardCurves:
        """K back-to-back calls: times times K, VRAM unchanged."""
        return self.model_copy(
            update={
                "cpu_ms": None if self.cpu_ms is None else self.cpu_ms.scaled(k),
                "gpu_ms": None if self.gpu_ms is None else self.gpu_ms.scaled(k),
            }
        )
