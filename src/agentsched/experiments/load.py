"""Scheduling under load (issue 19): policies over arrival streams of a workflow mix, at given loads.

**Load** = arrival rate / capacity. The **capacity** of a mix (per second) is measured, not assumed:
the highest Poisson arrival rate that a baseline *sustains* on the machine (``sustains``: a fixed
noise-free stream as long as the study's (within 60-120 s), and of at least ``MIN_CAPACITY_ARRIVALS``
arrivals, in which every invocation completes, no oom,
and the last one ends within ``DRAIN_FRACTION`` of the duration after the stream, or within the
longest isolated latency of the mix when that is longer (an invocation arriving at the very end
needs that much alone): an overloaded machine's backlog grows without bound), found by doubling and bisection; capacity = the best of
every baseline with and without admission (``CAPACITY_POLICIES``; agentsched is not part of the
definition). A load of 0.9 is then a stream at 90% of the highest rate any baseline sustains.
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
from dataclasses import dataclass
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.experiments.jobs import check_jobs, run_jobs
from agentsched.model.mapping import enumerate_mappings
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.oracle import MAX_ORACLE_MAPPINGS, brute_force
from agentsched.planner.load import LoadPlanner
from agentsched.policies.load.baselines import AllGpu, Dmda, HeftStream, LeastLoaded, WithAdmission, oracle_static
from agentsched.testbeds.arrivals import Arrival, check_duration, check_rate, make_arrivals
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.stream import DEFAULT_CPU_SLOTS, StreamResult, run_stream
from agentsched.model.live import StaticDecider, StreamDecider

CAPACITY_DURATION_S = 120.0  # length of the noise-free streams of the capacity search (at most, unless
# a slow rate needs longer for MIN_CAPACITY_ARRIVALS)
MIN_CAPACITY_DURATION_S = 60.0  # ... and at least; within these, the study's own duration
# ... and long enough to expect this many arrivals (a Poisson count: about that many). Why: with a
# few dozen arrivals (a mix of 0.3/s in 120 s) "sustained" turned on whether the very last
# invocation was a slow one, a tail latency, not a backlog: the verdict flipped from rate to rate
# (dmda failed 0.33/s and every rate above, while on 3,000 s streams it kept up with 0.9/s).
MIN_CAPACITY_ARRIVALS = 1000
DRAIN_FRACTION = 0.05  # sustained: the last invocation ends within 5% of the duration after it
START_RATE_PER_S = 0.5
MIN_RATE_PER_S = 0.01
MAX_RATE_PER_S = 1000.0
BISECTIONS = 6  # the rate known within 2^-6 of its bracket (about 1.6%)
BASELINES = ("all-gpu", "oracle-static", "heft", "dmda", "least-loaded")
CAPACITY_POLICIES = BASELINES + tuple(f"{b}+adm" for b in BASELINES)
LOAD_POLICIES = ("agentsched", "agentsched-noadm") + BASELINES + tuple(f"{b}+adm" for b in BASELINES)
DEFAULT_POLICIES = ("agentsched",) + BASELINES + tuple(f"{b}+adm" for b in BASELINES)
ISOLATION_DECIDERS = ("agentsched",) + BASELINES  # alone, admission changes nothing
ISOLATION_MAPPINGS = 1024  # brute force up to this many distinct mappings (3^6 = 729, 2^10): about 0.5 s


@dataclass(frozen=True)
class Machine:
    """The shared machine of a stream."""

    vram_budget_mb: float | None = None
    cpu_slots: int = DEFAULT_CPU_SLOTS
    noise_sigma: float = 0.03
    world: str | None = None

    def kwargs(self, seed: int, *, noise: bool = True) -> dict[str, Any]:
        return {"vram_budget_mb": self.vram_budget_mb, "cpu_slots": self.cpu_slots, "seed": seed,
                "noise_sigma": self.noise_sigma if noise else 0.0, "world": self.world}


def oracle_mappings(workflows: Sequence[Workflow], world: str | None) -> dict[str, dict[str, Mode]]:
    """Each workflow's isolated best mapping on the noise-free simulator (its own budget); workflows
    too large for brute force get HEFT's mapping."""
    testbed = SimTestbed(noise_sigma=0.0, world=world)
    out: dict[str, dict[str, Mode]] = {}
    for wf in workflows:
        if len(wf.decision_space.modes) ** len(wf.tasks) <= MAX_ORACLE_MAPPINGS // 10:
            out[wf.name] = dict(brute_force(wf, testbed).best.mapping)
        else:
            out[wf.name] = dict(HeftStream().plan(_probe_invocation(wf), None))  # type: ignore[arg-type]
    return out


def _probe_invocation(wf: Workflow):  # noqa: ANN202 - a one-off Invocation for a static plan
    from agentsched.model.live import Invocation

    return Invocation(0, 0, wf, 0.0, wf.task_cards)


def make_decider(name: str, oracle: Mapping[str, Mapping[str, Mode]]) -> StreamDecider:
    """The decider named ``name`` (one of ``LOAD_POLICIES``)."""
    if name not in LOAD_POLICIES:
        raise AgentschedError(f"unknown load policy {name!r} (valid: {', '.join(LOAD_POLICIES)})")
    if name.startswith("agentsched"):
        return LoadPlanner(admission=name == "agentsched")
    base, adm = name.removesuffix("+adm"), name.endswith("+adm")
    makers: dict[str, Callable[[], StreamDecider]] = {
        "all-gpu": AllGpu, "heft": HeftStream, "dmda": Dmda, "least-loaded": LeastLoaded,
        "oracle-static": lambda: oracle_static(oracle)}
    d = makers[base]()
    return WithAdmission(d) if adm else d


def isolated_ms(workflows: Sequence[Workflow], oracle: Mapping[str, Mapping[str, Mode]],
                machine: Machine) -> dict[str, float]:
    """Latency of each workflow alone on the noise-free shared machine: the best of every static
    mapping (brute force, when there are at most ``ISOLATION_MAPPINGS`` distinct ones) and of every
    policy's run alone (``ISOLATION_DECIDERS``, its oracle mapping among them). Why not its oracle
    mapping's alone: that is the best on the workflow's own VRAM budget, not on the shared machine's
    (S13's oracle takes 637 ms alone where all-gpu takes 219 ms on 8192 MB; a 10-task generated
    workflow whose oracle does not fit took dmda's 9,274 ms, agentsched's 2,653 ms): slowdowns vs
    isolation were understated up to 3.5x."""
    kwargs = machine.kwargs(0, noise=False)
    out = {}
    for wf in workflows:
        deciders = [make_decider(name, oracle) for name in ISOLATION_DECIDERS]
        deciders += [StaticDecider({wf.name: m}) for m in _distinct_mappings(wf)]
        lat = [ms for d in deciders for ms in run_stream([wf], [Arrival(0.0, 0)], d, **kwargs).latencies_ms()]
        if not lat:
            raise AgentschedError(f"workflow {wf.name}: no mapping tried runs alone on the shared machine")
        out[wf.name] = min(lat)
    return out


def _distinct_mappings(wf: Workflow) -> list[dict[str, Mode]]:
    """Every mapping of ``wf`` that runs differently (a host-only tool on a GPU mode runs on the CPU),
    or none when there are more than ``ISOLATION_MAPPINGS`` of them."""
    cards = wf.task_cards
    if len(wf.decision_space.modes) ** len(wf.tasks) > ISOLATION_MAPPINGS * 16:
        return []
    distinct: dict[tuple[Mode, ...], dict[str, Mode]] = {}
    for mapping in enumerate_mappings(wf):
        distinct.setdefault(tuple(effective_mapping(cards, mapping).items()), dict(mapping))
    return list(distinct.values()) if len(distinct) <= ISOLATION_MAPPINGS else []


def sustains(workflows: Sequence[Workflow], make: Callable[[], StreamDecider], machine: Machine,
             rate_per_s: float, duration_s: float = CAPACITY_DURATION_S, longest_ms: float = 0.0) -> bool:
    """Does the decider keep up with Poisson arrivals at ``rate_per_s`` (noise-free, one fixed
    stream of ``duration_s``, longer where that holds under ``MIN_CAPACITY_ARRIVALS``)? Every invocation completes (no oom, no error) and the last ends within
    ``DRAIN_FRACTION`` of the stream's duration after it, or ``longest_ms`` (the mix's longest
    isolated latency) when that is longer: why, a workflow of 40 s alone could never be sustained
    in a 120 s stream otherwise, however slow the arrivals; an overloaded machine's backlog grows
    past either."""
    if rate_per_s > 0:  # (a rate of 0 or less is make_arrivals' one-line error)
        duration_s = max(duration_s, MIN_CAPACITY_ARRIVALS / rate_per_s)
    arrivals = make_arrivals("poisson", rate_per_s=rate_per_s, duration_s=duration_s,
                             names=[wf.name for wf in workflows], rng=random.Random("capacity"))
    limit_ms = duration_s * 1000.0 + max(duration_s * 1000.0 * DRAIN_FRACTION, longest_ms)
    res = run_stream(workflows, arrivals, make(), stop_ms=limit_ms, **machine.kwargs(0, noise=False))
    return res.count("ok") == len(arrivals) and res.end_ms <= limit_ms


def max_sustainable_rate(workflows: Sequence[Workflow], make: Callable[[], StreamDecider], machine: Machine,
                         duration_s: float = CAPACITY_DURATION_S, longest_ms: float = 0.0) -> float:
    """The highest Poisson rate (per second) the decider sustains (``sustains``): doubling from
    ``START_RATE_PER_S`` to a bracket, then ``BISECTIONS`` bisections; 0 when it sustains none."""
    def ok(rate: float) -> bool:
        return sustains(workflows, make, machine, rate, duration_s, longest_ms)

    lo, hi = 0.0, START_RATE_PER_S
    while ok(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_RATE_PER_S:
            return lo
    if lo == 0.0:  # below the start rate: search down
        hi_ok = hi
        while hi_ok > MIN_RATE_PER_S and not ok(hi_ok):
            hi_ok /= 2
        if hi_ok <= MIN_RATE_PER_S:
            return 0.0
        lo, hi = hi_ok, hi_ok * 2
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def sustainable_rate(workflows: Sequence[Workflow], name: str, oracle: Mapping[str, Mapping[str, Mode]],
                     machine: Machine, duration_s: float, longest_ms: float) -> float:
    """Policy ``name``'s sustainable rate (``max_sustainable_rate``): one job of ``sustainable_rates``."""
    return max_sustainable_rate(workflows, lambda: make_decider(name, oracle), machine, duration_s, longest_ms)


def sustainable_rates(workflows: Sequence[Workflow], names: Sequence[str], machine: Machine,
                      oracle: Mapping[str, Mapping[str, Mode]], duration_s: float, longest_ms: float, *,
                      jobs: int = 1, done: Callable[[str, float], None] | None = None) -> dict[str, float]:
    """Each named policy's sustainable rate, searched side by side on ``jobs`` processes
    (``jobs.run_jobs``: the same rates as one after the other); ``done(name, rate)`` as each is found."""
    calls = [(sustainable_rate, (workflows, n, oracle, machine, duration_s, longest_ms)) for n in names]
    rates = run_jobs(calls, jobs, None if done is None else lambda i, rate: done(names[i], rate))
    return dict(zip(names, rates))


def capacity_per_s(workflows: Sequence[Workflow], machine: Machine, oracle: Mapping[str, Mapping[str, Mode]],
                   duration_s: float = CAPACITY_DURATION_S, longest_ms: float | None = None,
                   progress: Callable[[str], None] | None = None, jobs: int = 1) -> tuple[float, dict[str, float]]:
    """The mix's capacity (the best baseline's sustainable rate), and every baseline's;
    ``longest_ms``: the mix's longest isolated latency (computed when not given); ``progress``: told
    each baseline's rate as it is found (the search takes most of a short study); ``jobs``: processes."""
    if longest_ms is None:
        longest_ms = max(isolated_ms(workflows, oracle, machine).values())
    rates = sustainable_rates(workflows, CAPACITY_POLICIES, machine, oracle, duration_s, longest_ms, jobs=jobs,
                              done=_search_told(progress))
    return _capacity(rates), rates


def _capacity(rates: Mapping[str, float]) -> float:
    """The best of the baselines' sustainable ``rates`` (a one-line error when none sustains any)."""
    best = max(rates[b] for b in CAPACITY_POLICIES)
    if best <= 0:
        raise AgentschedError(f"no baseline sustains even {MIN_RATE_PER_S:g} arrivals/s on this machine (each drops "
                              "invocations to oom or falls behind): give a larger --vram-budget-mb or more "
                              "--cpu-slots")
    return best


def _search_told(progress: Callable[[str], None] | None) -> Callable[[str, float], None] | None:
    """What ``progress`` is told as each search ends: a baseline's rate (the capacity search), or a
    policy's own (its throughput at saturation)."""
    if progress is None:
        return None
    found = 0

    def told(name: str, rate: float) -> None:
        nonlocal found
        if name in CAPACITY_POLICIES:
            found += 1
            progress(f"capacity search: {name} sustains {rate:g}/s ({found}/{len(CAPACITY_POLICIES)} baselines)")
        else:
            progress(f"saturation: {name} sustains {rate:g}/s")
    return told


def seeded_arrivals(arrival: str, rate_per_s: float, duration_s: float, names: Sequence[str],
                    seed: int) -> list[Arrival]:
    """Stream number ``seed`` of a study (the same for every policy, and for ``agentsched loadgen``)."""
    return make_arrivals(arrival, rate_per_s=rate_per_s, duration_s=duration_s, names=names,
                         rng=random.Random(f"arrivals:{seed}"))


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
    is only as reachable as the floor lets it be (S1-S13 at 60%: the floor's p50 was 0.80x the best
    baseline's)."""
    lat = [isolated_ms[a.workflow] for stream in streams for a in stream]
    return {"load": load, "p50_ms": _rnd(percentile(lat, 0.5)), "p99_ms": _rnd(percentile(lat, 0.99))}


def _rnd(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def summarize(policy: str, load: float | None, rate: float, results: list[StreamResult], duration_s: float,
              isolated: Mapping[str, float]) -> dict[str, Any]:
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
        "policy": policy, "load": load, "rate_per_s": round(rate, 4),
        "p50_ms": _rnd(percentile(lat, 0.5)), "p95_ms": _rnd(percentile(lat, 0.95)), "p99_ms": _rnd(percentile(lat, 0.99)),
        "throughput_per_s": round(statistics.fmean(tput), 4),
        "oom": sum(r.count("oom") for r in results), "errors": sum(r.count("error") for r in results),
        "gpu_util": round(statistics.fmean(util), 4),
        "slowdown_by_workflow": {w: round(statistics.fmean(v) / isolated[w], 3) for w, v in sorted(by_wf.items())},
        "decision_ms_p50": _rnd(percentile(decision, 0.5), 4), "invocations": sum(len(r.invocations) for r in results),
    }


def run_load(workflows: Sequence[Workflow], policies: Sequence[str], *, machine: Machine, duration_s: float,
             seeds: int, loads: Sequence[float] | None = None, rates: Sequence[float] | None = None,
             arrival: str = "poisson", progress: Callable[[str], None] | None = None,
             jobs: int = 1, capacity_per_s: float | None = None) -> dict[str, Any]:
    """Every policy at every load (or rate), ``seeds`` streams each (the same streams for every
    policy); the searches, then the rows, run side by side on ``jobs`` processes. A given
    ``capacity_per_s`` (an earlier study's) skips every search: no saturation throughput then."""
    check_study(workflows, policies, duration_s, seeds, loads, rates, arrival, capacity_per_s)
    check_jobs(jobs)
    names = [wf.name for wf in workflows]
    oracle = oracle_mappings(workflows, machine.world)
    isolated = isolated_ms(workflows, oracle, machine)
    if capacity_per_s is None:
        sustained = _searches(workflows, policies, machine, oracle, duration_s, max(isolated.values()), jobs,
                              progress)
        baseline_rates = {b: sustained[b] for b in CAPACITY_POLICIES}
        capacity = _capacity(baseline_rates)
    else:
        sustained, baseline_rates, capacity = {}, {}, float(capacity_per_s)
    points = [(ld, ld * capacity) for ld in loads] if loads is not None else [(r / capacity, r) for r in rates]  # type: ignore[union-attr]
    floor = [isolation_floor(round(load, 4), [seeded_arrivals(arrival, rate, duration_s, names, seed)
                                              for seed in range(seeds)], [isolated[n] for n in names])
             for load, rate in points]
    calls = [(study_row, (workflows, name, oracle, machine, round(load, 4), rate, arrival, duration_s, seeds, isolated))
             for load, rate in points for name in policies]
    rows = run_jobs(calls, jobs, None if progress is None
                    else lambda i, row: progress(f"{row['policy']} at load {row['load']:.2f}"))
    return {"capacity_per_s": round(capacity, 4), "capacity_searched": capacity_per_s is None,
            "capacity_by_baseline": {k: round(v, 4) for k, v in baseline_rates.items()}, "isolated_ms":
            {k: round(v, 3) for k, v in isolated.items()},
            "saturation_throughput_per_s": {n: round(sustained[n], 4) for n in policies if n in sustained},
            "arrival": arrival, "duration_s": duration_s, "seeds": seeds,
            "machine": {"vram_budget_mb": machine.vram_budget_mb, "cpu_slots": machine.cpu_slots,
                        "noise_sigma": machine.noise_sigma, "world": machine.world or "a5500"},
            "isolation_floor": floor, "rows": rows}


def _searches(workflows: Sequence[Workflow], policies: Sequence[str], machine: Machine,
              oracle: Mapping[str, Mapping[str, Mode]], duration_s: float, longest_ms: float, jobs: int,
              progress: Callable[[str], None] | None) -> dict[str, float]:
    """Every baseline's sustainable rate (the capacity search) and each policy's (its throughput at
    saturation), side by side: a policy's own search does not need the capacity."""
    # why a floor: shorter search streams judge a rate by a handful of arrivals (S1+S7: capacity 5.75/s on
    # 30 s streams, 9.9-10.6/s on 60-240 s ones), and "load" would mean another rate at every --duration-s
    search_s = min(CAPACITY_DURATION_S, max(MIN_CAPACITY_DURATION_S, duration_s))
    searched = CAPACITY_POLICIES + tuple(n for n in policies if n not in CAPACITY_POLICIES)
    return sustainable_rates(workflows, searched, machine, oracle, search_s, longest_ms, jobs=jobs,
                             done=_search_told(progress))


def study_steps(policies: Sequence[str], points: int, *, searched: bool = True) -> int:
    """How many times ``run_load`` tells its ``progress``: once per search (the baselines' and each policy's
    own, when the capacity is searched) and once per row."""
    searches = len(set(CAPACITY_POLICIES) | set(policies)) if searched else 0
    return searches + points * len(policies)


def check_study(workflows: Sequence[Workflow], policies: Sequence[str], duration_s: float, seeds: int,
                loads: Sequence[float] | None, rates: Sequence[float] | None, arrival: str,
                capacity_per_s: float | None = None) -> None:
    """A one-line error for a study that cannot run, before minutes of capacity search."""
    if (loads is None) == (rates is None):
        raise AgentschedError("give either loads or rates")
    if capacity_per_s is not None:
        if isinstance(capacity_per_s, bool) or not isinstance(capacity_per_s, (int, float)) \
                or not (math.isfinite(capacity_per_s) and capacity_per_s > 0):
            raise AgentschedError(f"capacity (--capacity-per-s) must be a finite number > 0 per second, "
                                  f"got {capacity_per_s!r}")
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


def study_row(workflows: Sequence[Workflow], name: str, oracle: Mapping[str, Mapping[str, Mode]], machine: Machine,
              load: float | None, rate: float, arrival: str, duration_s: float, seeds: int,
              isolated: Mapping[str, float]) -> dict[str, Any]:
    """One row: policy ``name`` over the study's ``seeds`` streams at ``rate`` (a job of ``run_load``)."""
    names = [wf.name for wf in workflows]
    results = [run_stream(workflows, seeded_arrivals(arrival, rate, duration_s, names, seed),
                          make_decider(name, oracle), **machine.kwargs(seed)) for seed in range(seeds)]
    return summarize(name, load, rate, results, duration_s, isolated)
