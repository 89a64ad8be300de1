"""The shape of the simulated world's per-task noise (its scale, sigma, is the testbed's ``noise_sigma``).

Each task's isolated work (and load) is multiplied by a factor drawn from the run's injected
``random.Random``:

* ``lognormal`` (the default): ``exp(N(0, sigma))``, one ``rng.gauss(0, sigma)`` draw;
* ``student_t``: ``exp(sigma * T)`` with T Student-t with ``df`` degrees of freedom (one
  ``rng.gauss`` and one ``rng.gammavariate`` draw), heavier-tailed than the normal; the exponent is
  clipped to +-ln(100) so one draw can never overflow simulated time;
* plus, for either, **stragglers**: with probability ``straggler_probability`` (one ``rng.random()``
  draw, only when it is > 0) the factor is multiplied by ``straggler_factor``.

sigma = 0 means no noise at all (expected values, no stragglers). A world file says
``"noise": {"kind": "student_t", "df": 3, "straggler_probability": 0.02, "straggler_factor": 3}``.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentsched.errors import WorldError

MAX_DF = 1e6  # beyond it Student-t is the normal
MAX_STRAGGLER_FACTOR = 100.0
_MAX_LOG_FACTOR = math.log(100.0)  # a Student-t draw is clipped to a factor in [1/100, 100]


class Noise(BaseModel):
    """The noise shape of a world (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: Literal["lognormal", "student_t"] = "lognormal"
    df: float | None = Field(default=None, gt=0, le=MAX_DF)  # Student-t degrees of freedom (student_t only)
    straggler_probability: float = Field(default=0.0, ge=0, lt=1)  # chance a task is a straggler
    straggler_factor: float = Field(default=1.0, ge=1, le=MAX_STRAGGLER_FACTOR)  # how much longer it takes

    @model_validator(mode="after")
    def _df_with_student_t(self) -> Noise:
        if (self.kind == "student_t") != (self.df is not None):
            raise ValueError("df is required with kind student_t, and only there")
        return self

    @property
    def is_default(self) -> bool:
        return self.kind == "lognormal" and self.straggler_probability == 0


def noise_factor(rng: random.Random, sigma: float, noise: Noise) -> float:
    """One multiplicative noise factor (see the module docstring for the draws it makes)."""
    if noise.kind == "lognormal":
        factor = math.exp(rng.gauss(0.0, sigma))
    else:
        factor = student_t_factor(rng, sigma, noise.df)  # type: ignore[arg-type]
    if noise.straggler_probability > 0 and rng.random() < noise.straggler_probability:
        factor *= noise.straggler_factor
    return factor


def student_t_factor(rng: random.Random, sigma: float, df: float) -> float:
    """``exp(sigma * T)``, T ~ Student-t(df), the exponent clipped to +-ln(100)."""
    if not (math.isfinite(sigma) and sigma >= 0):
        raise WorldError(f"sigma must be finite and >= 0, got {sigma!r}")
    if not (math.isfinite(df) and 0 < df <= MAX_DF):
        raise WorldError(f"df must be in (0, {MAX_DF:g}], got {df!r}")
    z = rng.gauss(0.0, 1.0)
    chi2 = rng.gammavariate(df / 2.0, 2.0)
    t = z / math.sqrt(chi2 / df) if chi2 > 0 else math.copysign(math.inf, z)
    log_factor = sigma * t if sigma > 0 else 0.0  # sigma 0 with an infinite t: no noise, not nan
    return math.exp(max(-_MAX_LOG_FACTOR, min(_MAX_LOG_FACTOR, log_factor)))
