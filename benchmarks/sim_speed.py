"""Simulator throughput: executions per second of the 4-task scenarios (target >= 10,000/s), and
the brute-force oracle's cost, measured side by side in one run through the public API.

    python benchmarks/sim_speed.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import random
import time

from agentsched import SimTestbed, brute_force, list_scenarios, load_scenario
from agentsched.model.mapping import enumerate_mappings

TARGET_EXEC_PER_S = 10_000


def throughput(wf, seconds: float, rng: random.Random) -> float:
    tb = SimTestbed(noise_sigma=0.03)
    maps = list(enumerate_mappings(wf))
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for m in maps:
            tb.run(wf, m, rng=rng)
        n += len(maps)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0, help="measuring time per scenario")
    a = ap.parse_args()
    rng = random.Random(0)
    rates = []
    print(f"{'scenario':8s} {'exec/s':>10s} {'x target':>9s} {'oracle ms':>10s}")
    for name in list_scenarios():
        wf = load_scenario(name)
        r = throughput(wf, a.seconds, rng)
        t0 = time.perf_counter()
        brute_force(wf, SimTestbed(noise_sigma=0))
        oracle_ms = 1000 * (time.perf_counter() - t0)
        rates.append(r)
        print(f"{name:8s} {r:10,.0f} {r / TARGET_EXEC_PER_S:9.2f} {oracle_ms:10.1f}")
    worst = min(rates)
    print(f"slowest scenario: {worst:,.0f} executions/s = {worst / TARGET_EXEC_PER_S:.2f}x the 10,000/s target")
    # a 10-task chain+fan-out: the oracle must handle n ~ 10 in seconds (3^10 = 59,049 mappings)
    from agentsched import Workflow

    tools = [
        "clip",
        "bert_base",
        "whisper_base",
        "groupby",
        "ocr",
        "resnet50",
        "image_resize",
        "vector_search",
        "doc_merger",
        "minilm_l6",
    ]
    for n, space in ((10, "binary"), (8, "three_way"), (10, "three_way")):
        big = Workflow(
            name="big",
            decision_space=space,
            vram_budget_mb=2500,
            tasks={f"T{i}": {"tool": t} for i, t in enumerate(tools[:n])},
            edges=[[f"T{i}", f"T{i + 1}"] for i in range(0, n - 1, 2)],
        )
        t0 = time.perf_counter()
        res = brute_force(big, SimTestbed(noise_sigma=0))
        dt = time.perf_counter() - t0
        print(
            f"oracle over {n} tasks ({space}, {len(res.ranked):,} mappings): {dt:.2f} s "
            f"({len(res.ranked) / dt:,.0f} mappings/s)"
        )


if __name__ == "__main__":
    main()
