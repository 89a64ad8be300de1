"""Scheduling under load on machines, worlds, mixes and arrival patterns drawn at random: where
does agentsched lose to the best baseline? (issue 19; robustness, not a tuning set)

    python benchmarks/load_sweep.py [--configs 12] [--seed 1] [--seeds 2] [--json-out FILE]

Each configuration is drawn from ``random.Random(seed)``:

* a mix: 2-6 generated workflows (3-10 tasks, layered, fan-out, random or chain, binary or
  three-way, model/generate.py with a drawn generator seed), or 3-7 of the paper's S1-S13;
* a machine: VRAM budget 4096, 8192, 12288 or 24576 MB, 4, 8 or 16 CPU slots;
* a world (the contention law the planner never sees): a5500, -max, -threshold, -saturating,
  -power or -heavy;
* arrivals: Poisson (2 in 3) or bursty.

Per configuration, every load policy (agentsched, the five baselines with and without admission)
runs the same streams at 30%, 60% and 90% of the mix's capacity (``experiments/traffic.py``), ``--seeds``
streams each, long enough for 400 arrivals at 30% load (300-20,000 simulated seconds: a mix of
long workflows has a low capacity). A cell is (configuration, load): agentsched's p50 and
p99 over the best clean baseline's (no oom, no error), and agentsched's oom count; per
configuration, its saturation throughput over the best baseline's (the capacity's search). The
summary counts the cells where agentsched is at most the best baseline, within 5%, and over 20%
worse, and lists the worst cells with their configuration, so each can be re-run.

Size: 1-5 minutes per configuration on 2 cores (the capacity and saturation searches included).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.experiments.traffic import DEFAULT_POLICIES, Machine, capacity_per_s, oracle_mappings, run_load
from agentsched.model.generate import generate_workflow
from agentsched.scenarios import load_scenario

WORLDS = ("a5500", "a5500-max", "a5500-threshold", "a5500-saturating", "a5500-power", "a5500-heavy")
LOADS = (0.3, 0.6, 0.9)
MIN_DURATION_S = 300.0
MAX_DURATION_S = 20_000.0
INVOCATIONS_AT_30 = 400  # streams long enough for this many arrivals at 30% load (a p99 of 4 or more)
WORST_SHOWN = 8


def draw_config(rng: random.Random) -> dict[str, Any]:
    """One configuration (module docstring), as plain data."""
    if rng.random() < 2 / 3:
        gseed = rng.randrange(1000)
        mix = [
            {
                "tasks": rng.randint(3, 10),
                "topology": rng.choice(["layered", "fan-out", "random", "chain"]),
                "space": rng.choice(["binary", "three_way"]),
                "seed": gseed,
                "index": i,
            }
            for i in range(rng.randint(2, 6))
        ]
        kind = "generated"
    else:
        mix = [f"S{i}" for i in sorted(rng.sample(range(1, 14), rng.randint(3, 7)))]
        kind = "paper"
    return {
        "kind": kind,
        "mix": mix,
        "vram_budget_mb": rng.choice([4096, 8192, 12288, 24576]),
        "cpu_slots": rng.choice([4, 8, 16]),
        "world": rng.choice(WORLDS),
        "arrival": rng.choice(["poisson", "poisson", "bursty"]),
    }


def workflows(cfg: dict[str, Any]) -> list:
    if cfg["kind"] == "paper":
        return [load_scenario(name) for name in cfg["mix"]]
    return [generate_workflow(**w) for w in cfg["mix"]]


def cells(cfg: dict[str, Any], seeds: int) -> list[dict[str, Any]]:
    """agentsched against the best clean baseline at each load of one configuration."""
    machine = Machine(vram_budget_mb=cfg["vram_budget_mb"], cpu_slots=cfg["cpu_slots"], world=cfg["world"])
    wfs = workflows(cfg)
    # the capacity first, for the streams' length (run_load finds the same one again: same search)
    capacity, _ = capacity_per_s(wfs, machine, oracle_mappings(wfs, machine.world))
    duration_s = min(MAX_DURATION_S, max(MIN_DURATION_S, INVOCATIONS_AT_30 / (LOADS[0] * capacity)))
    res = run_load(
        wfs,
        DEFAULT_POLICIES,
        machine=machine,
        duration_s=duration_s,
        seeds=seeds,
        loads=list(LOADS),
        arrival=cfg["arrival"],
    )
    sat = res["saturation_throughput_per_s"]
    best_sat = max(v for k, v in sat.items() if k != "traffic-aware")
    out = []
    for load in LOADS:
        rows = [r for r in res["rows"] if abs(r["load"] - load) < 1e-9]
        ours = next(r for r in rows if r["policy"] == "traffic-aware")
        clean = [
            r
            for r in rows
            if r["policy"] != "traffic-aware" and r["oom"] == 0 and r["errors"] == 0 and r["p50_ms"] is not None
        ]
        cell: dict[str, Any] = {
            "load": load,
            "oom": ours["oom"],
            "errors": ours["errors"],
            "saturation_ratio": sat["traffic-aware"] / best_sat,
            "p50_ms": ours["p50_ms"],
            "p99_ms": ours["p99_ms"],
            "invocations": ours["invocations"],
            "duration_s": round(duration_s),
        }
        for q in ("p50_ms", "p99_ms"):
            best = min(clean, key=lambda r: r[q]) if clean else None
            cell[f"{q[:3]}_ratio"] = (ours[q] / best[q]) if best and ours[q] is not None and best[q] else None
            cell[f"{q[:3]}_best"] = best["policy"] if best else None
        out.append(cell)
    return out


def describe(cfg: dict[str, Any]) -> str:
    mix = (
        ",".join(cfg["mix"])
        if cfg["kind"] == "paper"
        else f"{len(cfg['mix'])} generated (seed {cfg['mix'][0]['seed']})"
    )
    return f"{mix}; {cfg['vram_budget_mb']} MB, {cfg['cpu_slots']} slots, {cfg['world']}, {cfg['arrival']}"


def summary(results: list[dict[str, Any]]) -> list[str]:
    flat = [(r["config"], c) for r in results for c in r.get("cells", [])]
    lines = [
        f"{len(results)} configurations, {len(flat)} cells (configuration x load); "
        f"agentsched oom {sum(c['oom'] for _, c in flat)}, errors {sum(c['errors'] for _, c in flat)}"
    ]
    for q in ("p50", "p99"):
        ratios = [c[f"{q}_ratio"] for _, c in flat if c[f"{q}_ratio"] is not None]
        if not ratios:
            continue
        lines.append(
            f"{q} / best clean baseline: <= 1.00 in {sum(x <= 1.0 for x in ratios)}, <= 1.05 in "
            f"{sum(x <= 1.05 for x in ratios)}, > 1.20 in {sum(x > 1.2 for x in ratios)} of "
            f"{len(ratios)}; median {sorted(ratios)[len(ratios) // 2]:.3f}, worst {max(ratios):.3f}"
        )
    sats = [r["cells"][0]["saturation_ratio"] for r in results if r.get("cells")]
    if sats:
        lines.append(
            f"saturation throughput / best baseline's: >= 1 in {sum(x >= 1 - 1e-9 for x in sats)} of "
            f"{len(sats)}; lowest {min(sats):.3f}"
        )
    worst = sorted((c for c in flat if c[1]["p99_ratio"] is not None), key=lambda c: -c[1]["p99_ratio"])
    lines.append("worst p99 cells:")
    lines += [
        f"  {c['p99_ratio']:.3f} (p50 {c['p50_ratio'] or 0:.3f}) at {c['load']:.0%}: {describe(cfg)} "
        f"[best: {c['p99_best']}]"
        for cfg, c in worst[:WORST_SHOWN]
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=12, help="configurations drawn")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draw")
    ap.add_argument("--seeds", type=int, default=2, help="streams per load and policy")
    ap.add_argument("--json-out", help="write every configuration and cell here")
    args = ap.parse_args()
    if args.configs < 1 or args.seeds < 1:
        print("error: --configs and --seeds must be >= 1", file=sys.stderr)
        return 2
    rng = random.Random(f"load-sweep:{args.seed}")
    results = []
    for k in range(args.configs):
        cfg = draw_config(rng)
        t0 = time.perf_counter()
        try:
            got = {"config": cfg, "cells": cells(cfg, args.seeds)}
        except AgentschedError as e:  # e.g. a mix no baseline sustains: say so, go on
            got = {"config": cfg, "error": str(e)}
        results.append(got)
        row = got.get("error") or (
            f"{got['cells'][0]['duration_s']} s streams, saturation {got['cells'][0]['saturation_ratio']:.2f}; "
        ) + " | ".join(
            f"{c['load']:.0%}: p50 {c['p50_ratio'] or 0:.2f} p99 {c['p99_ratio'] or 0:.2f} oom {c['oom']}"
            for c in got["cells"]
        )
        print(f"[{k + 1}/{args.configs}] {describe(cfg)} ({time.perf_counter() - t0:.0f} s): {row}", flush=True)
    print("\n".join(summary(results)))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
