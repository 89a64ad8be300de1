"""The load study's machine, deciders and capacity: what a load of 0.9 is 0.9 of.

The **capacity** of a mix (per second) is measured, not assumed: the highest Poisson arrival rate
that a baseline *sustains* on the machine (``sustains``: a fixed noise-free stream as long as the
study's (within 60-120 s), and of at least ``MIN_CAPACITY_ARRIVALS`` arrivals, in which every
invocation completes, no oom, and the last one ends within ``DRAIN_FRACTION`` of the duration after
the stream, or within the longest isolated latency of the mix when that is longer: an overloaded
machine's backlog grows without bound), found by doubling and bisection; capacity = the best of
every baseline with and without admission (``CAPACITY_POLICIES``). Each workflow's isolated latency
(``isolated_ms``) is the best of every mapping and policy alone on the noise-free shared machine.
The study itself: ``traffic.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsched.errors import AgentschedError, PolicyError
from agentsched.experiments.jobs import run_jobs
from agentsched.loop.registry import DECIDERS, decider_by_name
from agentsched.model.live import Decider, StaticDecider
from agentsched.model.mapping import enumerate_mappings
from agentsched.model.workflow import Mode, Workflow, effective_mapping
from agentsched.oracle import MAX_ORACLE_MAPPINGS, brute_force
from agentsched.policies.traffic.baselines import HeftStream
from agentsched.testbeds.arrivals import Arrival, make_arrivals
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.stream import DEFAULT_CPU_SLOTS, run_stream

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
LOAD_POLICIES = tuple(DECIDERS)  # traffic-aware, traffic-aware-noadm, the baselines with and without admission
DEFAULT_POLICIES = ("traffic-aware",) + BASELINES + tuple(f"{b}+adm" for b in BASELINES)
ISOLATION_DECIDERS = ("traffic-aware",) + BASELINES  # alone, admission changes nothing
ISOLATION_MAPPINGS = 1024  # brute force up to this many distinct mappings (3^6 = 729, 2^10): about 0.5 s


@dataclass(frozen=True)
class Machine:
    """The shared machine of a stream."""

    vram_budget_mb: float | None = None
    cpu_slots: int = DEFAULT_CPU_SLOTS
    noise_sigma: float = 0.03
    world: str | None = None

    def kwargs(self, seed: int, *, noise: bool = True) -> dict[str, Any]:
        return {
            "vram_budget_mb": self.vram_budget_mb,
            "cpu_slots": self.cpu_slots,
            "seed": seed,
            "noise_sigma": self.noise_sigma if noise else 0.0,
            "world": self.world,
        }


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


def make_decider(name: str, oracle: Mapping[str, Mapping[str, Mode]]) -> Decider:
    """The decider named ``name`` (one of ``LOAD_POLICIES``, or an alias): ``loop/registry.decider_by_name``."""
    try:
        return decider_by_name(name, oracle=oracle)
    except PolicyError as e:
        raise AgentschedError(str(e)) from None


def isolated_ms(
    workflows: Sequence[Workflow], oracle: Mapping[str, Mapping[str, Mode]], machine: Machine
) -> dict[str, float]:
    """Latency of each workflow alone on the noise-free shared machine: the best of every static
    mapping (brute force, when there are at most ``ISOLATION_MAPPINGS`` distinct ones) and of every
    policy's run alone (``ISOLATION_DECIDERS``, its oracle mapping among them). Why not its oracle
    mapping's alone: that is the best on the workflow's own VRAM budget, not on the shared machine's
    (S13's oracle takes 637 ms alone where all-gpu takes 219 ms on 8192 MB, and an oracle may not fit
    the shared budget at all): slowdowns vs isolation would be understated."""
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


def sustains(
    workflows: Sequence[Workflow],
    make: Callable[[], Decider],
    machine: Machine,
    rate_per_s: float,
    duration_s: float = CAPACITY_DURATION_S,
    longest_ms: float = 0.0,
) -> bool:
    """Does the decider keep up with Poisson arrivals at ``rate_per_s`` (noise-free, one fixed
    stream of ``duration_s``, longer where that holds under ``MIN_CAPACITY_ARRIVALS``)? Every invocation completes (no oom, no error) and the last ends within
    ``DRAIN_FRACTION`` of the stream's duration after it, or ``longest_ms`` (the mix's longest
    isolated latency) when that is longer: why, a workflow of 40 s alone could never be sustained
    in a 120 s stream otherwise, however slow the arrivals; an overloaded machine's backlog grows
    past either."""
    if rate_per_s > 0:  # (a rate of 0 or less is make_arrivals' one-line error)
        duration_s = max(duration_s, MIN_CAPACITY_ARRIVALS / rate_per_s)
    arrivals = make_arrivals(
        "poisson",
        rate_per_s=rate_per_s,
        duration_s=duration_s,
        names=[wf.name for wf in workflows],
        rng=random.Random("capacity"),
    )
    limit_ms = duration_s * 1000.0 + max(duration_s * 1000.0 * DRAIN_FRACTION, longest_ms)
    res = run_stream(workflows, arrivals, make(), stop_ms=limit_ms, **machine.kwargs(0, noise=False))
    return res.count("ok") == len(arrivals) and res.end_ms <= limit_ms


def max_sustainable_rate(
    workflows: Sequence[Workflow],
    make: Callable[[], Decider],
    machine: Machine,
    duration_s: float = CAPACITY_DURATION_S,
    longest_ms: float = 0.0,
) -> float:
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


def sustainable_rate(
    workflows: Sequence[Workflow],
    name: str,
    oracle: Mapping[str, Mapping[str, Mode]],
    machine: Machine,
    duration_s: float,
    longest_ms: float,
) -> float:
    """Policy ``name``'s sustainable rate (``max_sustainable_rate``): one job of ``sustainable_rates``."""
    return max_sustainable_rate(workflows, lambda: make_decider(name, oracle), machine, duration_s, longest_ms)


def sustainable_rates(
    workflows: Sequence[Workflow],
    names: Sequence[str],
    machine: Machine,
    oracle: Mapping[str, Mapping[str, Mode]],
    duration_s: float,
    longest_ms: float,
    *,
    jobs: int = 1,
    done: Callable[[str, float], None] | None = None,
) -> dict[str, float]:
    """Each named policy's sustainable rate, searched side by side on ``jobs`` processes
    (``jobs.run_jobs``: the same rates as one after the other); ``done(name, rate)`` as each is found."""
    calls = [(sustainable_rate, (workflows, n, oracle, machine, duration_s, longest_ms)) for n in names]
    rates = run_jobs(calls, jobs, None if done is None else lambda i, rate: done(names[i], rate))
    return dict(zip(names, rates, strict=True))


def capacity_per_s(
    workflows: Sequence[Workflow],
    machine: Machine,
    oracle: Mapping[str, Mapping[str, Mode]],
    duration_s: float = CAPACITY_DURATION_S,
    longest_ms: float | None = None,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> tuple[float, dict[str, float]]:
    """The mix's capacity (the best baseline's sustainable rate), and every baseline's;
    ``longest_ms``: the mix's longest isolated latency (computed when not given); ``progress``: told
    each baseline's rate as it is found (the search takes most of a short study); ``jobs``: processes."""
    if longest_ms is None:
        longest_ms = max(isolated_ms(workflows, oracle, machine).values())
    rates = sustainable_rates(
        workflows, CAPACITY_POLICIES, machine, oracle, duration_s, longest_ms, jobs=jobs, done=_search_told(progress)
    )
    return _capacity(rates), rates


def _capacity(rates: Mapping[str, float]) -> float:
    """The best of the baselines' sustainable ``rates`` (a one-line error when none sustains any)."""
    best = max(rates[b] for b in CAPACITY_POLICIES)
    if best <= 0:
        raise AgentschedError(
            f"no baseline sustains even {MIN_RATE_PER_S:g} arrivals/s on this machine (each drops "
            "invocations to oom or falls behind): give a larger --vram-budget-mb or more "
            "--cpu-slots"
        )
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
