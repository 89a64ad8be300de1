"""A restarted live planner: cold (the tag priors) against warm (what it learned before), side by side.

    python benchmarks/load_warm_start.py [--worlds a5500,a5500-power,...] [--load 0.6] [--seeds 6]

What ``serve --placement live`` gains from keeping its learned contention in the store
(service/contention_memory.py). Per world: one ``agentsched`` stream of 300 simulated s (arrival
seed 200) learns; then the same held-out streams (arrival seeds 100..) run under a fresh planner
(cold) and under one started from what the first learned (warm, ``TrafficPlanner(learned=...,
ratios=...)``: its contention and its measured ratios, what a restarted server does). Printed: warm / cold p50 and p99 over the first 30 s, 60 s and 300 s of the
streams (percentiles pooled over the seeds). Mix S1-S13, the machine of load_targets.py, load 60%
of the mix's capacity in that world. No target: a report of what a restart loses. About 15 s per
world on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses

from load_targets import MACHINE

from agentsched.experiments.traffic import capacity_per_s, oracle_mappings, percentile, seeded_arrivals
from agentsched.planner.traffic import TrafficPlanner
from agentsched.scenarios import load_scenario
from agentsched.testbeds.stream import run_stream

WORLDS = ("a5500", "a5500-max", "a5500-power", "a5500-threshold", "a5500-saturating", "a5500-heavy")
SPANS_S = (30.0, 60.0, 300.0)
LEARN_SEED = 200


def _percentiles(
    wfs: list, machine, rate: float, span_s: float, seeds: int, learned: dict | None, ratios: dict | None = None
) -> tuple[float, float]:
    names = [w.name for w in wfs]
    lat: list[float] = []
    for seed in range(100, 100 + seeds):
        arrivals = seeded_arrivals("poisson", rate, span_s, names, seed)
        planner = TrafficPlanner(learned=learned, ratios=ratios)
        lat += run_stream(wfs, arrivals, planner, **machine.kwargs(seed)).latencies_ms()
    return percentile(lat, 0.5), percentile(lat, 0.99)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default=",".join(WORLDS), help="comma-separated simulated worlds")
    ap.add_argument("--load", type=float, default=0.6, help="fraction of the mix's capacity")
    ap.add_argument("--seeds", type=int, default=6, help="held-out streams per span")
    args = ap.parse_args()
    wfs = [load_scenario(f"S{i}") for i in range(1, 14)]
    names = [w.name for w in wfs]
    print(
        f"S1-S13 at {args.load:.0%} load, {args.seeds} streams; warm / cold (p50, p99) over the first "
        + ", ".join(f"{s:g} s" for s in SPANS_S)
    )
    for world in args.worlds.split(","):
        machine = dataclasses.replace(MACHINE, world=world)
        rate = args.load * capacity_per_s(wfs, machine, oracle_mappings(wfs, world), 120.0)[0]
        teacher = TrafficPlanner()
        run_stream(
            wfs, seeded_arrivals("poisson", rate, 300.0, names, LEARN_SEED), teacher, **machine.kwargs(LEARN_SEED)
        )
        learned = teacher.learner.learned()
        ratios = dict(teacher.measured.log_ratio)  # as the store keeps them: every tool measured
        cells = []
        for span in SPANS_S:
            cold = _percentiles(wfs, machine, rate, span, args.seeds, None)
            warm = _percentiles(wfs, machine, rate, span, args.seeds, learned, ratios)
            cells.append(f"{warm[0] / cold[0]:.3f} / {warm[1] / cold[1]:.3f}")
        print(f"  {world:18} learned from {teacher.learner.runs:5d} runs:  " + "   ".join(cells))


if __name__ == "__main__":
    main()
