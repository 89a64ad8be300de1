"""Arrival streams for the stream simulator (``stream.py``): when each invocation arrives, and of
which workflow.

* ``poisson_arrivals``: exponential inter-arrival times at ``rate_per_s``; each arrival's workflow
  drawn uniformly from the mix;
* ``bursty_arrivals``: on/off: Poisson at ``rate_per_s / on_fraction`` during "on" periods and
  nothing during "off" periods (exponential period lengths with means ``on_mean_s`` and
  ``off_mean_s`` so that ``on_fraction = on / (on + off)``): the same mean rate, in bursts;
* ``read_trace``: a trace file of ``TIME_S,WORKFLOW`` lines (``#`` comments and blank lines
  skipped; WORKFLOW a name of the mix); a bad line is a one-line ``TestbedError`` naming it.

All draws come from one injected ``random.Random``: the same seed gives the same stream.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentsched.errors import TestbedError

ARRIVAL_KINDS = ("poisson", "bursty", "trace")
MAX_ARRIVALS = 5_000_000  # far beyond a benchmark; keeps a typo'd rate from eating the memory
MAX_DURATION_S = 1_000_000.0  # 11.6 simulated days: refused at once, not after a capacity search
BURST_ON_MEAN_S = 2.0  # mean length of an "on" period of the bursty stream
BURST_OFF_MEAN_S = 2.0  # mean length of an "off" period


@dataclass(frozen=True, slots=True)
class Arrival:
    """One invocation arriving."""

    time_ms: float  # simulated time of arrival
    workflow: int  # index into the workflow mix


def check_duration(duration_s: float) -> None:
    """One-line ``TestbedError`` for a stream duration that is not a number of seconds in (0, MAX_DURATION_S]."""
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise TestbedError(f"duration must be a finite number > 0 seconds, got {duration_s!r}")
    if duration_s > MAX_DURATION_S:
        raise TestbedError(f"duration {duration_s:,.0f} s: at most {MAX_DURATION_S:,.0f} simulated seconds")


def check_rate(rate_per_s: float, duration_s: float) -> None:
    """One-line ``TestbedError`` for a rate that is not a finite number > 0 per second, or that would
    bring more than ``MAX_ARRIVALS`` arrivals in ``duration_s`` (checked too)."""
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise TestbedError(f"arrival rate must be a finite number > 0 per second, got {rate_per_s!r}")
    check_duration(duration_s)
    if rate_per_s * duration_s > MAX_ARRIVALS:
        raise TestbedError(f"rate x duration = {rate_per_s * duration_s:,.0f} arrivals; at most {MAX_ARRIVALS:,}")


def _check(rate_per_s: float, duration_s: float, n_workflows: int) -> None:
    check_rate(rate_per_s, duration_s)
    if n_workflows < 1:
        raise TestbedError("an arrival stream needs at least one workflow")


def poisson_arrivals(rate_per_s: float, duration_s: float, n_workflows: int, rng: random.Random) -> list[Arrival]:
    """Poisson arrivals at ``rate_per_s`` over ``[0, duration_s)``, workflows uniform over the mix."""
    _check(rate_per_s, duration_s, n_workflows)
    out: list[Arrival] = []
    t_s = rng.expovariate(rate_per_s)
    while t_s < duration_s:
        out.append(Arrival(t_s * 1000.0, rng.randrange(n_workflows)))
        t_s += rng.expovariate(rate_per_s)
    return out


def bursty_arrivals(
    rate_per_s: float,
    duration_s: float,
    n_workflows: int,
    rng: random.Random,
    *,
    on_mean_s: float = BURST_ON_MEAN_S,
    off_mean_s: float = BURST_OFF_MEAN_S,
) -> list[Arrival]:
    """On/off arrivals of mean rate ``rate_per_s`` (module docstring); starts in an "on" period."""
    _check(rate_per_s, duration_s, n_workflows)
    if not (on_mean_s > 0 and off_mean_s >= 0):
        raise TestbedError(f"bursty periods must be on > 0 and off >= 0 seconds, got {on_mean_s}, {off_mean_s}")
    burst_rate = rate_per_s * (on_mean_s + off_mean_s) / on_mean_s
    out: list[Arrival] = []
    t_s = 0.0
    while t_s < duration_s:
        on_end = min(duration_s, t_s + rng.expovariate(1.0 / on_mean_s))
        t_s += rng.expovariate(burst_rate)
        while t_s < on_end:
            out.append(Arrival(t_s * 1000.0, rng.randrange(n_workflows)))
            t_s += rng.expovariate(burst_rate)
        t_s = on_end + (rng.expovariate(1.0 / off_mean_s) if off_mean_s > 0 else 0.0)
    return out


def read_trace(path: str | Path, names: Sequence[str]) -> list[Arrival]:
    """Arrivals from a ``TIME_S,WORKFLOW`` file (module docstring), sorted by time (stable)."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TestbedError(f"trace {p}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    index = {n: i for i, n in enumerate(names)}
    out: list[Arrival] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 2:
            raise TestbedError(f"trace {p}:{lineno}: expected TIME_S,WORKFLOW, got {line[:60]!r}")
        try:
            t_s = float(parts[0])
        except ValueError:
            raise TestbedError(f"trace {p}:{lineno}: time {parts[0][:30]!r} is not a number") from None
        if not (math.isfinite(t_s) and 0 <= t_s <= MAX_DURATION_S):  # (1e308 s was finite, its ms not)
            raise TestbedError(
                f"trace {p}:{lineno}: time must be a number of seconds in [0, {MAX_DURATION_S:,.0f}], "
                f"got {parts[0][:30]!r}"
            )
        if parts[1] not in index:
            known = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise TestbedError(f"trace {p}:{lineno}: unknown workflow {parts[1][:40]!r} (the mix has {known})")
        out.append(Arrival(t_s * 1000.0, index[parts[1]]))
        if len(out) > MAX_ARRIVALS:
            raise TestbedError(f"trace {p}: more than {MAX_ARRIVALS:,} arrivals")
    if not out:
        raise TestbedError(f"trace {p}: no arrivals in it")
    out.sort(key=lambda a: a.time_ms)
    return out


def make_arrivals(
    kind: str, *, rate_per_s: float, duration_s: float, names: Sequence[str], rng: random.Random
) -> list[Arrival]:
    """The stream of ``kind`` (``poisson``, ``bursty`` or ``trace:FILE``)."""
    if kind == "poisson":
        return poisson_arrivals(rate_per_s, duration_s, len(names), rng)
    if kind == "bursty":
        return bursty_arrivals(rate_per_s, duration_s, len(names), rng)
    if kind.startswith("trace:") and len(kind) > 6:
        return read_trace(kind[6:], names)
    raise TestbedError(f"unknown arrival kind {kind!r} (valid: poisson, bursty, trace:FILE)")
