"""Throughput of K concurrent invocations on a Ray cluster of 2 nodes against 1 node, in one run.

    PYTHONPATH=src python benchmarks/ray_throughput.py [--workflow S2] [--k 4] [--batches 5]
        [--node-cpus 1] [--size small] [--mapping A=cpu,...] [--emulate-gpu] [--json FILE]

Starts a Ray cluster on this machine (``ray.cluster_utils.Cluster``) with one node of
``--node-cpus`` CPUs, runs one warm-up batch and ``--batches`` measured batches of K invocations
at once (``RayTestbed.run_concurrent``), adds a second identical node and measures again with the
same testbed. Prints the throughput (ok invocations per second of wall time) on each and their
ratio. Every node runs on this one host: "nodes" are Ray's resource partitions (CPUs, fake GPUs,
vram_mb), so the ratio measures how the testbed spreads work as Ray offers more slots, bounded by
this host's cores; on a real cluster each node brings its own cores. Tool actors use one torch
thread each so that concurrent tasks do not oversubscribe the cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import ray
from ray.cluster_utils import Cluster

from agentsched.model.mapping import format_mapping, parse_mapping
from agentsched.model.workflow import Mode
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.ray import VRAM_RESOURCE, RayTestbed
from agentsched.testbeds.ray.cluster import WORKER_SYSTEM_CONFIG


def measure(tb: RayTestbed, wf: Any, mapping: dict, k: int, batches: int) -> dict[str, Any]:
    tb.run_concurrent(wf, mapping, k)  # warm-up: tool loads, worker processes on a new node
    results = [tb.run_concurrent(wf, mapping, k) for _ in range(batches)]
    e2e = [e.e2e_ms for r in results for e in r.executions if e.ok]
    wall = sum(r.wall_s for r in results)
    nodes = {n for r in results for e in r.executions for n in e.extra.get("nodes", {}).values()}
    return {
        "throughput_per_s": len(e2e) / wall,
        "wall_s": wall,
        "ok": len(e2e),
        "failed": sum(not e.ok for r in results for e in r.executions),
        "e2e_median_ms": statistics.median(e2e) if e2e else None,
        "nodes_used": len(nodes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workflow", default="S2")
    ap.add_argument("--k", type=int, default=4, help="invocations at once")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--node-cpus", type=int, default=1)
    ap.add_argument("--size", default="small")
    ap.add_argument("--mapping", default=None, help="default: every task on cpu")
    ap.add_argument("--emulate-gpu", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    wf = resolve_workflow(a.workflow)
    mapping = parse_mapping(wf, a.mapping) if a.mapping else {t: Mode.CPU for t in wf.task_ids}
    node = {"num_cpus": a.node_cpus, "num_gpus": 1, "resources": {VRAM_RESOURCE: wf.vram_budget_mb or 24_564.0}}
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={**node, "_system_config": WORKER_SYSTEM_CONFIG})
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    tb = RayTestbed(address=cluster.address, size=a.size, emulate_gpu=a.emulate_gpu, torch_threads=1)
    try:
        one = measure(tb, wf, mapping, a.k, a.batches)
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        two = measure(tb, wf, mapping, a.k, a.batches)
    finally:
        tb.close()
        ray.shutdown()
        cluster.shutdown()
    ratio = two["throughput_per_s"] / one["throughput_per_s"]
    print(
        f"{wf.name} {format_mapping(wf, mapping)}, K={a.k} at once, {a.batches} batches, "
        f"{a.node_cpus} CPU(s) per node, size {a.size}"
    )
    for label, r in (("1 node ", one), ("2 nodes", two)):
        print(
            f"{label}: {r['throughput_per_s']:.2f} invocations/s (median E2E {r['e2e_median_ms']:.1f} ms, "
            f"{r['ok']} ok, {r['failed']} failed, {r['nodes_used']} node(s) used)"
        )
    print(f"throughput ratio 2 nodes / 1 node: {ratio:.2f}x  (run took {time.perf_counter() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "workflow": wf.name,
                    "k": a.k,
                    "batches": a.batches,
                    "node_cpus": a.node_cpus,
                    "one_node": one,
                    "two_nodes": two,
                    "ratio": ratio,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
