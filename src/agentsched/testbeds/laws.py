"""Contention laws of the simulated world: how fast each of a set of co-running GPU tasks progresses.

Every law maps the (sensitivity s_i, pressure p_i) of the GPU tasks running together to a rate per
task (isolated speed = 1), with P_i = sum_{j != i} p_j the *foreign* pressure on task i:

* ``linear`` (the default, the law the planner's predictor assumes; ``model.contention.gpu_rates``):
  ``rate_i = 1 / (1 + s_i * P_i)``
* ``max``: only the strongest co-runner counts, ``rate_i = 1 / (1 + s_i * max_{j != i} p_j)``
* ``power``: ``rate_i = 1 / (1 + s_i * P_i ** gamma)``; gamma > 1 is superlinear (crowding hurts more
  than the sum of its parts), equal to ``linear`` where P_i = 1
* ``threshold``: contention only beyond a pressure threshold t (headroom the GPU absorbs),
  ``rate_i = 1 / (1 + s_i * max(0, P_i - t))``
* ``saturating``: the slowdown saturates at ``1 + s_i * k`` (scale k), ``rate_i = 1 / (1 + s_i * k *
  (1 - exp(-P_i / k)))``; like ``linear`` for small P_i

Each law reduces to rate 1 without co-runners (P_i = 0) and is non-increasing in every foreign
pressure. The public ``*_rates`` functions are pure and check their arguments (one-line
``WorldError``); ``rate_function(law)`` gives the simulator the unchecked kernel of a validated law.
A law is chosen in the world file (``"law": "max"`` or ``"law": {"kind": "power", "gamma": 1.5}``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentsched.errors import WorldError
from agentsched.model.contention import gpu_rates

MAX_GAMMA = 4.0  # beyond it a power law makes 3 co-runners 80x slower: a typo, not a machine
MAX_LAW_PARAM = 1e3  # threshold and scale bound, as the contention parameters' own bound
LAW_KINDS = ("linear", "max", "power", "threshold", "saturating")

RateFunction = Callable[[Sequence[float], Sequence[float]], list[float]]


# -- argument checks (one-line WorldError naming the argument) --------------------------------------


def _check_tasks(sensitivity: Sequence[float], pressure: Sequence[float]) -> None:
    if len(sensitivity) != len(pressure):
        raise WorldError(f"sensitivity and pressure differ in length ({len(sensitivity)} vs {len(pressure)})")
    for label, values in (("sensitivity", sensitivity), ("pressure", pressure)):
        for v in values:
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise WorldError(f"{label} must be finite and >= 0, got {v!r}")


def _check_param(label: str, value: float, *, low: float, high: float, low_open: bool) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value) and value <= high
    ok = ok and (value > low if low_open else value >= low)
    if not ok:
        bracket = "(" if low_open else "["
        raise WorldError(f"{label} must be in {bracket}{low:g}, {high:g}], got {value!r}")


# -- kernels (unchecked; the simulator's hot path) --------------------------------------------------


def _max_kernel(sensitivity: Sequence[float], pressure: Sequence[float]) -> list[float]:
    n = len(pressure)
    if n < 2:
        return [1.0] * n
    top = max(range(n), key=pressure.__getitem__)  # the largest pressure; others' largest is it
    second = max(p for j, p in enumerate(pressure) if j != top)
    return [1.0 / (1.0 + s * (second if i == top else pressure[top])) for i, s in enumerate(sensitivity)]


def _power_kernel(sensitivity: Sequence[float], pressure: Sequence[float], gamma: float) -> list[float]:
    total = sum(pressure)
    # max(0, ...): a float sum minus one of its terms may dip below 0 by an ulp
    return [1.0 / (1.0 + s * max(0.0, total - p) ** gamma) for s, p in zip(sensitivity, pressure, strict=False)]


def _threshold_kernel(sensitivity: Sequence[float], pressure: Sequence[float], threshold: float) -> list[float]:
    total = sum(pressure)
    return [1.0 / (1.0 + s * max(0.0, total - p - threshold)) for s, p in zip(sensitivity, pressure, strict=False)]


def _saturating_kernel(sensitivity: Sequence[float], pressure: Sequence[float], scale: float) -> list[float]:
    total = sum(pressure)
    return [
        1.0 / (1.0 + s * scale * -math.expm1(-max(0.0, total - p) / scale))
        for s, p in zip(sensitivity, pressure, strict=False)
    ]


# -- the laws as pure, checked functions ------------------------------------------------------------


def linear_rates(sensitivity: Sequence[float], pressure: Sequence[float]) -> list[float]:
    """``rate_i = 1 / (1 + s_i * sum_{j != i} p_j)`` (the default law, ``gpu_rates``)."""
    _check_tasks(sensitivity, pressure)
    return gpu_rates(sensitivity, pressure)


def max_rates(sensitivity: Sequence[float], pressure: Sequence[float]) -> list[float]:
    """``rate_i = 1 / (1 + s_i * max_{j != i} p_j)``: only the strongest co-runner slows a task."""
    _check_tasks(sensitivity, pressure)
    return _max_kernel(sensitivity, pressure)


def power_rates(sensitivity: Sequence[float], pressure: Sequence[float], gamma: float) -> list[float]:
    """``rate_i = 1 / (1 + s_i * (sum_{j != i} p_j) ** gamma)``, gamma in (0, 4]."""
    _check_tasks(sensitivity, pressure)
    _check_param("gamma", gamma, low=0.0, high=MAX_GAMMA, low_open=True)
    return _power_kernel(sensitivity, pressure, gamma)


def threshold_rates(sensitivity: Sequence[float], pressure: Sequence[float], threshold: float) -> list[float]:
    """``rate_i = 1 / (1 + s_i * max(0, sum_{j != i} p_j - threshold))``, threshold in [0, 1000]."""
    _check_tasks(sensitivity, pressure)
    _check_param("threshold", threshold, low=0.0, high=MAX_LAW_PARAM, low_open=False)
    return _threshold_kernel(sensitivity, pressure, threshold)


def saturating_rates(sensitivity: Sequence[float], pressure: Sequence[float], scale: float) -> list[float]:
    """``rate_i = 1 / (1 + s_i * scale * (1 - exp(-sum_{j != i} p_j / scale)))``, scale in (0, 1000]."""
    _check_tasks(sensitivity, pressure)
    _check_param("scale", scale, low=0.0, high=MAX_LAW_PARAM, low_open=True)
    return _saturating_kernel(sensitivity, pressure, scale)


# -- the law of a world file ------------------------------------------------------------------------

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class LinearLaw(BaseModel):
    model_config = _FROZEN
    kind: Literal["linear"] = "linear"


class MaxLaw(BaseModel):
    model_config = _FROZEN
    kind: Literal["max"] = "max"


class PowerLaw(BaseModel):
    model_config = _FROZEN
    kind: Literal["power"] = "power"
    gamma: float = Field(gt=0, le=MAX_GAMMA)  # exponent of the foreign pressure


class ThresholdLaw(BaseModel):
    model_config = _FROZEN
    kind: Literal["threshold"] = "threshold"
    threshold: float = Field(ge=0, le=MAX_LAW_PARAM)  # foreign pressure the GPU absorbs for free


class SaturatingLaw(BaseModel):
    model_config = _FROZEN
    kind: Literal["saturating"] = "saturating"
    scale: float = Field(gt=0, le=MAX_LAW_PARAM)  # slowdown saturates at 1 + s * scale


Law = Annotated[LinearLaw | MaxLaw | PowerLaw | ThresholdLaw | SaturatingLaw, Field(discriminator="kind")]


def law_from_shorthand(value: Any) -> Any:
    """``"max"`` -> ``{"kind": "max"}``, so a law without parameters may be written as its name."""
    return {"kind": value} if isinstance(value, str) else value


def rate_function(law: BaseModel) -> RateFunction:
    """The simulator's rate function of a validated law (``linear``: ``gpu_rates`` itself, so the
    default world's arithmetic is unchanged)."""
    if isinstance(law, LinearLaw):
        return gpu_rates
    if isinstance(law, MaxLaw):
        return _max_kernel
    if isinstance(law, PowerLaw):
        return partial(_power_kernel, gamma=law.gamma)
    if isinstance(law, ThresholdLaw):
        return partial(_threshold_kernel, threshold=law.threshold)
    if isinstance(law, SaturatingLaw):
        return partial(_saturating_kernel, scale=law.scale)
    raise WorldError(f"unknown contention law {law!r} (valid: {', '.join(LAW_KINDS)})")
