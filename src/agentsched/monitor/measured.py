"""What the monitor keeps per mapping: its feasible runs' E2E as an exact running sum, its failures and
peak VRAM (``Measured``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agentsched.model.mapping import MappingT


def _two_sum(a: float, b: float) -> tuple[float, float]:
    """a + b as (rounded sum, exact rounding error) (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@dataclass
class Measured:
    """Everything measured for one mapping (mutable monitor state, not reported as is).

    The feasible runs' E2E are kept as a count, the last value and an exact running sum (Shewchuk's
    partials, as ``math.fsum`` keeps them), not as a list: a mapping served for days keeps O(1)
    memory, and its mean is bit for bit ``statistics.fmean`` of every run."""

    mapping: MappingT  # the mapping
    samples: int = 0  # feasible runs measured (rounds and probes)
    last_ms: float | None = None  # the last feasible run's E2E
    infeasible: bool = False  # some run of it failed
    peak_vram_mb: float = 0.0  # max over its runs
    message: str = ""  # the last failure's message
    first_round: int | None = None  # first round it was proposed in (None: only probed)
    _partials: list[float] = field(default_factory=list, repr=False)

    def add(self, e2e_ms: float) -> None:
        """One more feasible run's E2E."""
        x, out = e2e_ms, []
        for y in self._partials:
            x, err = _two_sum(x, y) if abs(x) >= abs(y) else _two_sum(y, x)
            if err:
                out.append(err)
        out.append(x)
        self._partials = out
        self.samples += 1
        self.last_ms = e2e_ms

    @property
    def mean_ms(self) -> float | None:
        return math.fsum(self._partials) / self.samples if self.samples and not self.infeasible else None
