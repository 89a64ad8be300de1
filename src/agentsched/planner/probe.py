"""Probing by value: which candidate is worth an execution, under the model's uncertainty.

For each posterior draw s of the model, the relative gain of candidate c over the incumbent is
``g_s(c) = (E2E_s(incumbent) - E2E_s(c)) / E2E_s(incumbent)`` (paired: both predicted under the same
draw, so an error common to both cancels; an infeasible prediction gains nothing). The expected
improvement is ``mean_s max(0, g_s(c))``; the optimistic gain is its upper quantile. A candidate
is worth probing while its optimistic gain exceeds the noise threshold: below it, even a lucky
model could not tell it from the incumbent with one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentsched.errors import PolicyError

OPTIMISTIC_QUANTILE = 0.9


@dataclass(frozen=True, slots=True)
class Value:
    """The value of running one candidate."""

    expected_gain: float  # E[max(0, relative gain)]
    optimistic_gain: float  # upper quantile of the relative gain
    mean_gain: float  # E[relative gain] (negative: the model expects it to be worse)


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def candidate_values(
    incumbent_e2e_ms: Sequence[float | None],
    candidates_e2e_ms: Sequence[Sequence[float | None]],
    quantile: float = OPTIMISTIC_QUANTILE,
) -> list[Value]:
    """``incumbent_e2e_ms[s]``: the incumbent's E2E under draw s; ``candidates_e2e_ms[c][s]``: candidate
    c's (None: infeasible under that draw). One ``Value`` per candidate."""
    if not 0 < quantile < 1:
        raise PolicyError(f"quantile must be in (0, 1), got {quantile}")
    n = len(incumbent_e2e_ms)
    if n == 0:
        raise PolicyError("candidate values need at least one posterior draw")
    out = []
    for row in candidates_e2e_ms:
        if len(row) != n:
            raise PolicyError(f"candidate has {len(row)} draws, the incumbent {n}")
        gains = []
        for inc, c in zip(incumbent_e2e_ms, row, strict=True):
            if c is None:
                gains.append(-1.0)  # why: an out-of-memory run gains nothing and costs its time
            elif inc is None:
                gains.append(1.0)  # the incumbent fails under this draw: any feasible run is a full gain
            else:
                gains.append((inc - c) / inc)
        out.append(Value(sum(max(0.0, g) for g in gains) / n, _quantile(gains, quantile), sum(gains) / n))
    return out


def worth_probing(value: Value, threshold: float) -> bool:
    """True while the optimistic gain exceeds the noise threshold."""
    return value.optimistic_gain > threshold
