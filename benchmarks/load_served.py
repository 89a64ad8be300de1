"""The stream of ``agentsched load`` against a real ``agentsched serve`` (issue 19 item 5), side by side.

    python benchmarks/load_served.py [--quick] [--duration-s 120] [--seeds 3] [--time-scale 10]
                                     [--policy oracle-static|agentsched | --unpinned]

Mix: S1-S13. Machine, on both sides: one GPU with an 8192 MB VRAM budget, 16 CPU slots, the default
world (a5500), noise sigma 0.03. Loads 0.3 and 0.6 of the mix's capacity (the definition of
``agentsched load``: the best baseline's sustainable rate, experiments/traffic.py); ``--seeds``
Poisson streams per load (``seeded_arrivals``: the streams ``agentsched load --seeds`` draws),
percentiles over the completed invocations of every seed pooled, as ``agentsched load`` pools them.

* Simulated: the stream simulator (``run_stream``) under ``oracle-static``.
* Served: ``agentsched serve S1 ... S13 --testbed sim --realtime --time-scale X`` in its own process,
  every workflow's mapping pinned (PUT /v1/workflows/NAME/mapping) to the same oracle mapping, and the
  stream fired at it open-loop over HTTP (experiments/loadgen.py); latency = answer time minus the
  arrival's due time, x the time scale (simulated ms).

The same policy on both sides: oracle-static (each workflow's isolated oracle mapping, applied to
every invocation, no admission), or with ``--policy agentsched`` the load-aware planner: simulated,
``agentsched load``'s ``agentsched``; served, ``serve --placement live`` (each task placed when it
becomes ready over the shared machine's live state), one fresh server per stream (the planner
learns as it goes: each stream starts it cold on both sides). The service's default policy (agent-plan, learning by rounds)
has no stream-simulator counterpart to compare with; ``--unpinned`` serves under it anyway,
against the same simulated oracle-static figures, to show what its rounds add (not a like-for-like
comparison: the ratios then measure the policy's difference too).

Target: served p50, p95, p99 within 15% of the simulated ones at 30% and 60% load. Also printed:
the server's own E2E percentiles (its simulator's figures: same physics, other noise draws and
arrival instants), the mean overhead (client latency minus server E2E: HTTP, the runtime, the
store, the clock thread, x the time scale), the generator's send lag, and oom counts on both sides.
Size: about 80 s (six streams of 120 simulated s at 10x, plus the server's start); --quick (one
seed, 60 s streams): about 20 s.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import httpx

from agentsched.experiments.loadgen import run_against, summarize_shots
from agentsched.experiments.traffic import (
    CAPACITY_DURATION_S,
    MIN_CAPACITY_DURATION_S,
    Machine,
    capacity_per_s,
    make_decider,
    oracle_mappings,
    percentile,
    seeded_arrivals,
)
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.stream import run_stream

MIX = tuple(f"S{i}" for i in range(1, 14))
MACHINE = Machine(vram_budget_mb=8192.0, cpu_slots=16, noise_sigma=0.03)
LOADS = (0.3, 0.6)
TOLERANCE = 0.15
POLICIES = ("oracle-static", "traffic-aware")


def start_server(db: Path, time_scale: float, live: bool) -> tuple[subprocess.Popen, str]:
    """``agentsched serve`` of the mix on the shared real-time simulator (a free port on 127.0.0.1)."""
    from serve_load import launch  # benchmarks/serve_load.py: a real server process

    return launch(
        [
            *MIX,
            "--store",
            str(db),
            "--testbed",
            "sim",
            "--realtime",
            "--time-scale",
            str(time_scale),
            "--vram-budget-mb",
            str(MACHINE.vram_budget_mb),
            "--cpu-slots",
            str(MACHINE.cpu_slots),
            "--max-concurrency",
            "100000",
            *(["--placement", "live"] if live else []),
        ]
    )


def pin(url: str, oracle: dict) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        for name, mapping in oracle.items():
            r = c.put(f"/v1/workflows/{name}/mapping", json={"mapping": {t: m.value for t, m in mapping.items()}})
            if r.status_code != 200:
                raise SystemExit(f"pinning {name} failed: HTTP {r.status_code} {r.text[:200]}")


def simulated(wfs: list, streams: list, oracle: dict, policy: str) -> dict:
    """The stream simulator's percentiles over every seed's stream (pooled) and its oom count."""
    lat: list[float] = []
    oom = 0
    for seed, arrivals in enumerate(streams):
        # the service's rule: a gpu_now task waits for VRAM other invocations hold (never an oom they cause)
        res = run_stream(wfs, arrivals, make_decider(policy, oracle), **MACHINE.kwargs(seed), gpu_now_waits=True)
        lat += res.latencies_ms()
        oom += res.count("oom")
    return {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99), "oom": oom}


def compare(load: float, sim: dict, served: dict) -> list[bool]:
    print(
        f"\nload {load:.0%}: {served['sent']} arrivals; oom simulated {sim['oom']}, served {served['oom']}; "
        f"served error {served['error']}, refused {served['refused']}, no answer {served['no-answer']}"
    )
    print(f"  {'':4} {'simulated':>10} {'served':>10} {'ratio':>7}        {'server E2E':>10} {'ratio':>7}")
    met = []
    for q in ("p50", "p95", "p99"):
        s, v, e = sim[q], served[f"{q}_ms"], served[f"e2e_{q}_ms"]
        ratio = v / s if s and v else float("nan")
        ok = abs(ratio - 1) <= TOLERANCE
        met.append(ok)
        print(f"  {q:4} {s:10,.1f} {v:10,.1f} {ratio:7.3f} {'met' if ok else 'MISSED':6} {e:10,.1f} {e / s:7.3f}")
    print(
        f"  overhead (client latency - server E2E) mean {served['overhead_ms_mean']:,.1f} ms simulated; "
        f"send lag p50 {served['lag_ms_p50']:,.2f} ms, max {served['lag_ms_max']:,.1f} ms simulated"
    )
    return met


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed, 60 s streams")
    ap.add_argument("--duration-s", type=float, default=120.0, help="simulated seconds per stream")
    ap.add_argument("--seeds", type=int, default=3, help="streams per load (pooled)")
    ap.add_argument("--time-scale", type=float, default=10.0, help="simulated ms per wall ms")
    ap.add_argument("--policy", choices=POLICIES, default="oracle-static", help="the policy on both sides")
    ap.add_argument("--unpinned", action="store_true", help="serve under the service's default policy (agent-plan)")
    args = ap.parse_args()
    if args.unpinned and args.policy != "oracle-static":
        ap.error("--unpinned compares agent-plan served with oracle-static simulated: no --policy")
    duration_s, seeds = (60.0, 1) if args.quick else (args.duration_s, args.seeds)
    wfs = [resolve_workflow(n) for n in MIX]
    names = [wf.name for wf in wfs]
    oracle = oracle_mappings(wfs, MACHINE.world)
    capacity, _ = capacity_per_s(
        wfs, MACHINE, oracle, min(CAPACITY_DURATION_S, max(MIN_CAPACITY_DURATION_S, duration_s))
    )
    live = args.policy == "traffic-aware"
    policies = f"{args.policy} simulated, agent-plan served" if args.unpinned else f"{args.policy} on both sides"
    print(
        f"mix S1-S13, capacity {capacity:.3f}/s, {policies}, {seeds} stream(s) of "
        f"{duration_s:g} simulated s per load, served at {args.time_scale:g}x"
    )
    met: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        for load in LOADS:
            streams = [seeded_arrivals("poisson", load * capacity, duration_s, names, seed) for seed in range(seeds)]
            # a stateful planner starts cold on each stream, as the simulated side does
            shots = [
                shot
                for i, arrivals in enumerate(streams)
                for shot in serve_stream(Path(tmp) / f"served-{load}-{i}.db", arrivals, names, args, oracle, live)
            ]
            met += compare(load, simulated(wfs, streams, oracle, args.policy), summarize_shots(shots))
    print(f"\n{sum(met)} of {len(met)} met (served percentile within {TOLERANCE:.0%} of the simulated one)")


def serve_stream(
    db: Path, arrivals: list, names: list[str], args: argparse.Namespace, oracle: dict, live: bool
) -> list:
    """One stream against a fresh server: pinned to the oracle mappings, placing live, or unpinned."""
    proc, url = start_server(db, args.time_scale, live)
    try:
        if not (live or args.unpinned):
            pin(url, oracle)
        return run_against(url, arrivals, names, time_scale=args.time_scale)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
