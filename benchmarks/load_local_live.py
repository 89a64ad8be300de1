"""Live placement on the local testbed against the simulator, on an emulated GPU (issue 19 item 5, live).

    python benchmarks/load_local_live.py [--quick] [--duration-s 60] [--seeds 2] [--world a5500]

This machine has no GPU. So the local testbed runs the S1-S13 tools as fakes that take their card
times for real, in threads that sleep: a CPU task sleeps its ``cpu_ms``; a GPU task's work
(``gpu_ms``) advances at the rate the world's contention law gives it beside the other GPU runs in
progress on the *emulated GPU* below (the benchmark owns it; the planner never sees it: it sees
the cards and what ran). On top of that everything is the real path of live placement
(``serve --testbed local --placement live`` without HTTP): ``LocalTestbed.run_live`` on one thread
per invocation, the process's ``LiveMachine``, the tool pool's FIFO CPU slots and VRAM ledger, the
load-aware planner learning from the runs the backend timed and the overlaps the machine measured.

The simulator runs the same streams (``seeded_arrivals``: ``agentsched load``'s) with the same
planner (a fresh one per stream on both sides), cards, world, VRAM budget (8192 MB) and CPU slots
(16), noise 0. Loads 0.3 and 0.6 of the mix's capacity (``agentsched load``'s definition).
Latency on the local side: the invocation's end minus its arrival's due time (real ms = card ms).
Target (the issue's): local p50, p95, p99 within 15% of the simulated ones.

Differences the comparison keeps: the emulated tools load instantly (the pool keeps them warm;
the simulator charges every ``gpu_queue`` task its card's load); threads wake a little late on a
loaded 2-core machine; a task placed is asked to start by its own thread. Size: about
2 x seeds x duration seconds of wall time, plus the capacity search (about 30 s).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agentsched.experiments.traffic import (
    CAPACITY_DURATION_S,
    Machine,
    capacity_per_s,
    oracle_mappings,
    percentile,
    seeded_arrivals,
)
from agentsched.model.cards import ToolCard, load_card_set
from agentsched.planner.traffic import TrafficPlanner
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.laws import rate_function
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.local import LocalBackend, LocalTestbed
from agentsched.testbeds.stream import run_stream
from agentsched.testbeds.tool_pool import ToolPool
from agentsched.testbeds.world import World, load_world

MIX = tuple(f"S{i}" for i in range(1, 14))
LOADS = (0.3, 0.6)
VRAM_BUDGET_MB = 8192.0
CPU_SLOTS = 16
TOLERANCE = 0.15


class EmulatedGpu:
    """GPU runs in progress, each advancing at the world's law's rate beside the others (a fluid
    model on the wall clock, the simulator's physics): every start and end moves every run's
    remaining work at the old rates, then sets the new ones and wakes the runs."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rates = rate_function(world.law)
        self.cond = threading.Condition()
        self.runs: dict[int, list[float]] = {}  # id -> [remaining ms, sensitivity, pressure, rate]
        self.last_s = time.perf_counter()
        self._ids = iter(range(1 << 62))

    def _advance(self) -> None:
        now = time.perf_counter()
        dt_ms = (now - self.last_s) * 1000.0
        for r in self.runs.values():
            r[0] -= dt_ms * r[3]
        self.last_s = now

    def _set_rates(self) -> None:
        runs = list(self.runs.values())
        for r, rate in zip(runs, self.rates([r[1] for r in runs], [r[2] for r in runs]) if runs else [], strict=False):
            r[3] = rate
        self.cond.notify_all()

    def run(self, card: ToolCard) -> None:
        s, p = self.world.params(card)
        with self.cond:
            self._advance()
            key = next(self._ids)
            me = self.runs[key] = [card.gpu_ms or card.cpu_ms, s, p, 1.0]
            self._set_rates()
            while True:
                self._advance()
                if me[0] <= 1e-6:
                    break
                self.cond.wait(me[0] / me[3] / 1000.0)
            del self.runs[key]
            self._set_rates()


class FakeTool:
    """A built-in tool's stand-in: its card's time on the CPU, or its work on the emulated GPU."""

    concurrent_safe = False
    has_gpu = True

    def __init__(self, card: ToolCard, gpu: EmulatedGpu) -> None:
        self.card, self.gpu, self.device = card, gpu, "cpu"

    def load(self, device: str = "cpu") -> None:
        self.device = device

    def unload(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def run(self, inputs: object) -> str:
        if self.device == "cpu":
            time.sleep(self.card.cpu_ms / 1000.0)
        else:
            self.gpu.run(self.card)
        return self.card.name


def local_stream(wfs: list, arrivals: list, world: World, workers: int) -> dict:
    """One stream, live-placed on the local testbed of fake tools: latencies (ms) and statuses."""
    cards = load_card_set("a5500")
    gpu = EmulatedGpu(world)
    pool = ToolPool(budget_mb=VRAM_BUDGET_MB)
    pool.set_cpu_slots(CPU_SLOTS)
    tb = LocalTestbed(
        tool_factory=lambda name, size, seed=0: FakeTool(cards.cards[name], gpu), pool=pool, cpu_workers=CPU_SLOTS
    )
    machine = LiveMachine(TrafficPlanner(), wfs, vram_budget_mb=VRAM_BUDGET_MB, cpu_slots=CPU_SLOTS)
    lat: list[float] = []
    statuses: dict[str, int] = {}
    lock = threading.Lock()

    def one(wf, due_s: float) -> None:
        x = tb.run_live(wf, machine.placer(wf))
        end_s = time.perf_counter()
        with lock:
            statuses[x.status.value] = statuses.get(x.status.value, 0) + 1
            if x.ok:
                lat.append((end_s - due_s) * 1000.0)

    t0 = time.perf_counter() + 0.2
    lag: list[float] = []
    with ThreadPoolExecutor(workers) as ex:
        for a in arrivals:
            due = t0 + a.time_ms / 1000.0
            wait_s = due - time.perf_counter()
            if wait_s > 0:
                time.sleep(wait_s)
            lag.append((time.perf_counter() - due) * 1000.0)
            ex.submit(one, wfs[a.workflow], due)
    tb.close()
    return {
        "lat": lat,
        "statuses": statuses,
        "lag_max_ms": max(lag, default=0.0),
        "gpu_runs_learned": machine.decider.learner.runs,
    }  # type: ignore[attr-defined]


def simulated(wfs: list, arrivals: list, world: World, seed: int) -> list[float]:
    res = run_stream(
        wfs,
        arrivals,
        TrafficPlanner(),
        vram_budget_mb=VRAM_BUDGET_MB,
        cpu_slots=CPU_SLOTS,
        noise_sigma=0.0,
        seed=seed,
        world=world,
    )
    return res.latencies_ms()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one stream of 30 s per load")
    ap.add_argument("--duration-s", type=float, default=60.0, help="seconds per stream (real time)")
    ap.add_argument("--seeds", type=int, default=2, help="streams per load (pooled)")
    ap.add_argument("--world", default="a5500", help="the emulated GPU's contention (a simulator world)")
    args = ap.parse_args()
    duration_s, seeds = (30.0, 1) if args.quick else (args.duration_s, args.seeds)
    LocalBackend._cuda_available = lambda self: True  # the emulated GPU takes GPU placements (no CUDA call)
    world = load_world(args.world)
    wfs = [resolve_workflow(n) for n in MIX]
    names = [wf.name for wf in wfs]
    machine = Machine(vram_budget_mb=VRAM_BUDGET_MB, cpu_slots=CPU_SLOTS, noise_sigma=0.0, world=args.world)
    capacity, _ = capacity_per_s(wfs, machine, oracle_mappings(wfs, args.world), CAPACITY_DURATION_S)
    print(
        f"mix S1-S13, world {args.world}; capacity {capacity:.3f}/s; {seeds} stream(s) of {duration_s:g} s per "
        f"load; local: fake tools on an emulated GPU, in real time"
    )
    met: list[bool] = []
    for load in LOADS:
        sim_lat: list[float] = []
        loc_lat: list[float] = []
        notes = []
        for seed in range(seeds):
            arrivals = seeded_arrivals("poisson", load * capacity, duration_s, names, seed)
            sim_lat += simulated(wfs, arrivals, world, seed)
            got = local_stream(wfs, arrivals, world, workers=512)
            loc_lat += got["lat"]
            notes.append(
                f"seed {seed}: {len(arrivals)} arrivals, {got['statuses']}, GPU runs learned "
                f"{got['gpu_runs_learned']}, send lag max {got['lag_max_ms']:.1f} ms"
            )
        print(f"\nload {load:.0%}: " + "; ".join(notes))
        print(f"  {'':4} {'simulated':>10} {'local':>10} {'ratio':>7}")
        for q in (0.5, 0.95, 0.99):
            s, v = percentile(sim_lat, q), percentile(loc_lat, q)
            ratio = v / s if s and v else float("nan")
            ok = abs(ratio - 1.0) <= TOLERANCE
            met.append(ok)
            print(f"  p{round(q * 100):<3} {s:10,.1f} {v:10,.1f} {ratio:7.3f} {'met' if ok else 'MISSED'}")
    print(f"\n{sum(met)} of {len(met)} met (local percentile within {TOLERANCE:.0%} of the simulated one)")
    return 0


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
