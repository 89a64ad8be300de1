"""Where the default bench's time goes: raw simulator throughput beside the whole loop's.

    python benchmarks/bench_speed.py            # default bench without outputs
    python benchmarks/bench_speed.py --quick    # 2 seeds

Prints executions per second of (1) the simulator alone on S5 under all-GPU, (2) the closed loop
per policy (simulator + policy + bookkeeping), and the share of the bench spent outside the
simulator. Ratios, not absolute times, are what to compare across machines.
"""

from __future__ import annotations

import argparse
import random
import time

from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.loop import run_loop
from agentsched.loop.registry import baseline_policies, is_available, make_policy
from agentsched.loop.runner import reference_oracle
from agentsched.model import Mode
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds import SimTestbed


def sim_throughput(n: int = 5000) -> float:
    wf = load_scenario("S5")
    m = {t: Mode.GPU_NOW for t in wf.task_ids}
    tb = SimTestbed()
    rng = random.Random(0)
    t0 = time.perf_counter()
    for _ in range(n):
        tb.run(wf, m, rng=rng)
    return n / (time.perf_counter() - t0)


def loop_throughput(policy: str, scenario: str = "S5") -> float:
    wf = load_scenario(scenario)
    tb = SimTestbed()
    # the oracle reference is handed the oracle searched on this testbed (it never builds one)
    opts = {"oracle": reference_oracle(wf, tb)} if policy == "oracle" else {}
    t0 = time.perf_counter()
    run = run_loop(wf, make_policy(policy, **opts), tb, rounds=20, repeats=5, seed=0)
    return run.executions_total / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2 seeds instead of 5")
    args = ap.parse_args()
    sim = sim_throughput()
    print(f"simulator alone (S5, all-GPU): {sim:,.0f} executions/s")
    policies = baseline_policies() + ["oracle"] + (["agent-rules"] if is_available("agent-rules") else [])
    for p in policies:
        rate = loop_throughput(p)
        print(f"loop with {p:12s}: {rate:,.0f} executions/s ({rate / sim:.2f} x simulator)")
    cfg = BenchConfig(
        scenarios=tuple(list_scenarios()), policies=tuple(policies), seeds=(0, 1) if args.quick else (0, 1, 2, 3, 4)
    )
    t0 = time.perf_counter()
    res = run_bench(cfg)
    wall = time.perf_counter() - t0
    execs = sum(r.metrics.executions for r in res.records)
    print(
        f"bench runs: {len(res.records)} runs, {execs:,} executions in {wall:.1f} s "
        f"({execs / wall:,.0f} executions/s; the simulator alone would take {execs / sim:.1f} s)"
    )


if __name__ == "__main__":
    main()
