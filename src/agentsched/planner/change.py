"""Change detection: a two-sided Page-Hinkley test over a stream of standardised residuals.

The planner feeds it, execution by execution, how far a measurement lies from what it expected,
in units of the noise: ``z = (log measured - log expected) / sd``. Under a stationary machine the
z's wander around 0 with spread ~1; after the machine changes (another job starts sharing the GPU)
they shift. The test keeps, for each direction, the cumulative sum of ``z - delta`` (``-z - delta``)
and its running minimum, and fires when the sum rises more than ``threshold`` above that minimum:
a shift of ``m`` noise units is detected after about ``threshold / (m - delta)`` executions, while
stationary noise must beat ``delta`` for ``threshold`` units in a row to fire (false alarms are
rare for ``delta >= 0.5``, ``threshold >= 8``). Pure functions over an immutable state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from agentsched.errors import PolicyError

DEFAULT_DELTA = 0.75  # tolerated drift per sample (noise units): smaller shifts are not a change
DEFAULT_THRESHOLD = 10.0  # evidence (noise units) needed to declare a change
MODEL_THRESHOLD = 15.0  # the model-residual stream (first runs of mappings) errs more while the model learns
Z_CLIP = 3.0  # one wild sample (a straggler, a heavy tail) adds at most this much evidence


@dataclass(frozen=True, slots=True)
class PageHinkley:
    """State of the test: the up and down sums and their running minima, and the samples seen."""

    up: float = 0.0
    up_min: float = 0.0
    down: float = 0.0
    down_min: float = 0.0
    n: int = 0


def ph_update(
    state: PageHinkley, z: float, *, delta: float = DEFAULT_DELTA, threshold: float = DEFAULT_THRESHOLD
) -> tuple[PageHinkley, int]:
    """Add one standardised residual. Returns the new state and +1 (upward change: slower than
    expected), -1 (faster) or 0. After a detection the caller restarts from ``PageHinkley()``."""
    if not math.isfinite(z):
        raise PolicyError(f"change detection: residual must be finite, got {z!r}")
    if delta < 0 or threshold <= 0:
        raise PolicyError("change detection: delta must be >= 0 and threshold > 0")
    z = max(-Z_CLIP, min(Z_CLIP, z))
    up = state.up + z - delta
    down = state.down - z - delta
    new = PageHinkley(up, min(state.up_min, up), down, min(state.down_min, down), state.n + 1)
    if new.up - new.up_min > threshold:
        return new, 1
    if new.down - new.down_min > threshold:
        return new, -1
    return new, 0


def first_change(
    zs: Iterable[float], *, delta: float = DEFAULT_DELTA, threshold: float = DEFAULT_THRESHOLD
) -> tuple[int, int] | None:
    """(index, direction) of the first detection over a whole stream, or None."""
    state = PageHinkley()
    for i, z in enumerate(zs):
        state, d = ph_update(state, z, delta=delta, threshold=threshold)
        if d:
            return i, d
    return None


@dataclass
class ChangeWatch:
    """The planner's three streams, each its own test: ``measured`` (a re-run's E2E against its mapping's
    epoch median), ``tasks`` (a re-run's contended GPU tasks against theirs: sees a change of contention
    off the critical path) and ``model`` (a mapping's first run against the corrected prediction)."""

    states: dict[str, PageHinkley] = field(default_factory=dict)

    def feed(self, stream: str, z: float) -> int:
        """Add one residual to ``stream``: +1 / -1 on a detected change (every stream restarts), else 0."""
        threshold = MODEL_THRESHOLD if stream == "model" else DEFAULT_THRESHOLD
        state, d = ph_update(self.states.get(stream, PageHinkley()), z, threshold=threshold)
        self.states[stream] = state
        if d:
            self.states.clear()
        return d
