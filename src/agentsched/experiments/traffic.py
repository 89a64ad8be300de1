"""Scheduling under load: policies over arrival streams of a workflow mix, at given loads.

**Load** = arrival rate / capacity. The **capacity** of a mix (per second) is measured, not assumed:
the highest Poisson arrival rate that a baseline *sustains* on the machine (``sustains``: a fixed
noise-free stream as long as the study's (within 60-120 s), and of at least ``MIN_CAPACITY_ARRIVALS``
arrivals, in which every invocation completes, no oom, and the last one ends within ``DRAIN_FRACTION``
of the duration after the stream, or within the longest isolated latency of the mix when that is
longer (an invocation arriving at the very end needs that much alone): an overloaded machine's backlog
grows without bound), found by doubling and bisection; capacity = the best of every baseline with and
without admission (``CAPACITY_POLICIES``; the traffic-aware decider is not part of the definition).
A load of 0.9 is then a stream at 90% of the highest rate any baseline sustains.
"Throughput at saturation" of a policy is its own sustainable rate by the same search.

Per policy and load a row ``{"policy", "load", "rate_per_s", "p50_ms", "p95_ms", "p99_ms",
"throughput_per_s", "oom", "errors", "gpu_util", "slowdown_by_workflow", "decision_ms_p50",
"invocations"}``: percentiles over the invocations that completed (all seeds pooled); ``oom`` and
``errors`` count the failed ones (their latency is not in the percentiles); throughput = completed /
the span from 0 to the later of the stream's duration and the last end (averaged over seeds);
``gpu_util`` = share of that span with a GPU task running; ``slowdown_by_workflow`` = mean latency of
a workflow's completed invocations / its isolated latency (its latency alone on the noise-free
shared machine, the best of every mapping and policy, ``isolated_ms``); ``decision_ms_p50`` = median
wall time the decider spent per invocation. Per load, ``isolation_floor``: the percentiles of the
stream's arrivals' isolated latencies, which no policy goes below (noise aside).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.experiments.jobs import check_jobs, run_jobs
from agentsched.experiments.traffic_capacity import (  # noqa: F401 - re-exported: the study's names
    BASELINES,
    BISECTIONS,
    CAPACITY_DURATION_S,
    CAPACITY_POLICIES,
    DEFAULT_POLICIES,
    DRAIN_FRACTION,
    ISOLATION_DECIDERS,
    ISOLATION_MAPPINGS,
    LOAD_POLICIES,
    MAX_RATE_PER_S,
    MIN_CAPACITY_ARRIVALS,
    MIN_CAPACITY_DURATION_S,
    MIN_RATE_PER_S,
    START_RATE_PER_S,
    Machine,
    _capacity,
    _search_told,
    capacity_per_s,
    isolated_ms,
    make_decider,
    max_sustainable_rate,
    oracle_mappings,
    sustainable_rate,
    sustainable_rates,
    sustains,
)
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.arrivals import Arrival, check_duration, check_rate, make_arrivals
from agentsched.testbeds.stream import StreamResult, run_stream


def seeded_arrivals(
    arrival: str, rate_per_s: float, duration_s: float, names: Sequence[str], seed: int
) -> list[Arrival]:
    """Stream number ``seed`` of a study (the same for every policy, and for ``agentsched loadgen``)."""
    return make_arrivals(
        arrival, rate_per_s=rate_per_s, duration_s=duration_s, names=names, rng=random.Random(f"arrivals:{seed}")
    )


def percentile(xs: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``xs`` (None when empty): one definition for the
    simulated rows and the served ones (``loadgen``), so the two compare like with like."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def isolation_floor(load: float, streams: Sequence[Sequence[Arrival]], isolated_ms: Sequence[float]) -> dict[str, Any]:
    """The percentiles no policy goes below on these streams (noise aside): each arrival's latency
    alone (``isolated_ms`` by workflow index), pooled as a row's are. Why: a target on a percentile
    is only as reachable as the floor lets it be (a mix's floor p50 can be well below the best
    baseline's)."""
    lat = [isolated_ms[a.workflow] for stream in streams for a in stream]
    return {"load": load, "p50_ms": _rnd(percentile(lat, 0.5)), "p99_ms": _rnd(percentile(lat, 0.99))}


def _rnd(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def summarize(
    policy: str,
    load: float | None,
    rate: float,
    results: list[StreamResult],
    duration_s: float,
    isolated: Mapping[str, float],
) -> dict[str, Any]:
    """One row of the module docstring from the stream results of every seed."""
    lat: list[float] = []
    by_wf: dict[str, list[float]] = {}
    tput, util, decision = [], [], []
    for r in results:
        lat.extend(r.latencies_ms())
        span_ms = max(duration_s * 1000.0, r.end_ms)
        tput.append(r.count("ok") / (span_ms / 1000.0))
        util.append(r.gpu_busy_ms / span_ms)
        for inv in r.invocations:
            decision.append(inv.decision_ns / 1e6)
            if inv.status == "ok":
                by_wf.setdefault(inv.workflow.name, []).append(inv.end_ms - inv.arrival_ms)  # type: ignore[operator]
    return {
        "policy": policy,
        "load": load,
        "rate_per_s": round(rate, 4),
        "p50_ms": _rnd(percentile(lat, 0.5)),
        "p95_ms": _rnd(percentile(lat, 0.95)),
        "p99_ms": _rnd(percentile(lat, 0.99)),
        "throughput_per_s": round(statistics.fmean(tput), 4),
        "oom": sum(r.count("oom") for r in results),
        "errors": sum(r.count("error") for r in results),
        "gpu_util": round(statistics.fmean(util), 4),
        "slowdown_by_workflow": {w: round(statistics.fmean(v) / isolated[w], 3) for w, v in sorted(by_wf.items())},
        "decision_ms_p50": _rnd(percentile(decision, 0.5), 4),
        "invocations": sum(len(r.invocations) for r in results),
    }


def run_load(
    workflows: Sequence[Workflow],
    policies: Sequence[str],
    *,
    machine: Machine,
    duration_s: float,
    seeds: int,
    loads: Sequence[float] | None = None,
    rates: Sequence[float] | None = None,
    arrival: str = "poisson",
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    capacity_per_s: float | None = None,  # noqa: F811 - the study's own figure, not the search
) -> dict[str, Any]:
    """Every policy at every load (or rate), ``seeds`` streams each (the same streams for every
    policy); the searches, then the rows, run side by side on ``jobs`` processes. A given
    ``capacity_per_s`` (an earlier study's) skips every search: no saturation throughput then."""
    check_study(workflows, policies, duration_s, seeds, loads, rates, arrival, capacity_per_s)
    check_jobs(jobs)
    names = [wf.name for wf in workflows]
    oracle = oracle_mappings(workflows, machine.world)
    isolated = isolated_ms(workflows, oracle, machine)
    if capacity_per_s is None:
        sustained = _searches(workflows, policies, machine, oracle, duration_s, max(isolated.values()), jobs, progress)
        baseline_rates = {b: sustained[b] for b in CAPACITY_POLICIES}
        capacity = _capacity(baseline_rates)
    else:
        sustained, baseline_rates, capacity = {}, {}, float(capacity_per_s)
    points = [(ld, ld * capacity) for ld in loads] if loads is not None else [(r / capacity, r) for r in rates]  # type: ignore[union-attr]
    floor = [
        isolation_floor(
            round(load, 4),
            [seeded_arrivals(arrival, rate, duration_s, names, seed) for seed in range(seeds)],
            [isolated[n] for n in names],
        )
        for load, rate in points
    ]
    calls = [
        (study_row, (workflows, name, oracle, machine, round(load, 4), rate, arrival, duration_s, seeds, isolated))
        for load, rate in points
        for name in policies
    ]
    rows = run_jobs(
        calls, jobs, None if progress is None else lambda i, row: progress(f"{row['policy']} at load {row['load']:.2f}")
    )
    return {
        "capacity_per_s": round(capacity, 4),
        "capacity_searched": capacity_per_s is None,
        "capacity_by_baseline": {k: round(v, 4) for k, v in baseline_rates.items()},
        "isolated_ms": {k: round(v, 3) for k, v in isolated.items()},
        "saturation_throughput_per_s": {n: round(sustained[n], 4) for n in policies if n in sustained},
        "arrival": arrival,
        "duration_s": duration_s,
        "seeds": seeds,
        "machine": {
            "vram_budget_mb": machine.vram_budget_mb,
            "cpu_slots": machine.cpu_slots,
            "noise_sigma": machine.noise_sigma,
            "world": machine.world or "a5500",
        },
        "isolation_floor": floor,
        "rows": rows,
    }


def _searches(
    workflows: Sequence[Workflow],
    policies: Sequence[str],
    machine: Machine,
    oracle: Mapping[str, Mapping[str, Mode]],
    duration_s: float,
    longest_ms: float,
    jobs: int,
    progress: Callable[[str], None] | None,
) -> dict[str, float]:
    """Every baseline's sustainable rate (the capacity search) and each policy's (its throughput at
    saturation), side by side: a policy's own search does not need the capacity."""
    # why a floor: shorter search streams judge a rate by a handful of arrivals (S1+S7: capacity 5.75/s on
    # 30 s streams, 9.9-10.6/s on 60-240 s ones), and "load" would mean another rate at every --duration-s
    search_s = min(CAPACITY_DURATION_S, max(MIN_CAPACITY_DURATION_S, duration_s))
    searched = CAPACITY_POLICIES + tuple(n for n in policies if n not in CAPACITY_POLICIES)
    return sustainable_rates(
        workflows, searched, machine, oracle, search_s, longest_ms, jobs=jobs, done=_search_told(progress)
    )


def study_steps(policies: Sequence[str], points: int, *, searched: bool = True) -> int:
    """How many times ``run_load`` tells its ``progress``: once per search (the baselines' and each policy's
    own, when the capacity is searched) and once per row."""
    searches = len(set(CAPACITY_POLICIES) | set(policies)) if searched else 0
    return searches + points * len(policies)


def check_study(
    workflows: Sequence[Workflow],
    policies: Sequence[str],
    duration_s: float,
    seeds: int,
    loads: Sequence[float] | None,
    rates: Sequence[float] | None,
    arrival: str,
    capacity_per_s: float | None = None,  # noqa: F811 - the study's own figure, not the search
) -> None:
    """A one-line error for a study that cannot run, before minutes of capacity search."""
    if (loads is None) == (rates is None):
        raise AgentschedError("give either loads or rates")
    if capacity_per_s is not None:
        if (
            isinstance(capacity_per_s, bool)
            or not isinstance(capacity_per_s, (int, float))
            or not (math.isfinite(capacity_per_s) and capacity_per_s > 0)
        ):
            raise AgentschedError(
                f"capacity (--capacity-per-s) must be a finite number > 0 per second, got {capacity_per_s!r}"
            )
        rates = [ld * capacity_per_s for ld in loads] if loads is not None else rates
    if seeds < 1:
        raise AgentschedError(f"seeds must be >= 1, got {seeds}")
    for name in policies:
        if name not in LOAD_POLICIES:
            raise AgentschedError(f"unknown load policy {name!r} (valid: {', '.join(LOAD_POLICIES)})")
    if not policies:
        raise AgentschedError("no load policy given")
    names = [wf.name for wf in workflows]
    if len(set(names)) != len(names):
        raise AgentschedError("the workflow mix names one workflow twice")
    # a bad arrival kind or trace file fails now, in one line, before minutes of capacity search
    make_arrivals(arrival, rate_per_s=1.0, duration_s=1.0, names=names, rng=random.Random(0))
    check_duration(duration_s)
    for rate in rates or ():  # (a rate's stream is bounded as the search's will be: fail now)
        check_rate(rate, duration_s)


def study_row(
    workflows: Sequence[Workflow],
    name: str,
    oracle: Mapping[str, Mapping[str, Mode]],
    machine: Machine,
    load: float | None,
    rate: float,
    arrival: str,
    duration_s: float,
    seeds: int,
    isolated: Mapping[str, float],
) -> dict[str, Any]:
    """One row: policy ``name`` over the study's ``seeds`` streams at ``rate`` (a job of ``run_load``)."""
    names = [wf.name for wf in workflows]
    results = [
        run_stream(
            workflows,
            seeded_arrivals(arrival, rate, duration_s, names, seed),
            make_decider(name, oracle),
            **machine.kwargs(seed),
        )
        for seed in range(seeds)
    ]
    return summarize(name, load, rate, results, duration_s, isolated)
