"""The stream of ``agentsched load`` against ``agentsched serve --testbed local`` (issue 19 item 5, local).

    python benchmarks/load_served_local.py [--quick] [--duration-s 60] [--seeds 2] [--cpu-slots 4]

The local testbed runs real tools in real threads; this machine has no GPU, so the mix is three
workflows of CPU tools whose work is a fixed sleep (50-400 ms; they use no CPU, so the server,
the load generator and the tools do not compete for the 2 cores): what is measured is the served
path under load (HTTP, the runtime, the store, the tool pool, the process's CPU slots), not a
model's speed. Everything else is real: a server process, its SQLite store, an open-loop HTTP load
generator (``experiments/loadgen.py``), cards measured by ``agentsched profile`` on this machine.

* Simulated: the stream simulator with those cards, ``--cpu-slots`` slots shared by every
  invocation, every task on the CPU (the tools have no GPU code), noise 0.
* Served: ``agentsched serve ... --testbed local --cpu-slots N --cards CARDS``, each workflow
  pinned to that mapping, the same streams fired at it at the time scale 1 (real time); latency =
  answer time minus the arrival's due time.

Loads 0.3 and 0.6 of the mix's capacity (``agentsched load``'s definition: the best baseline's
sustainable rate on the simulated machine). Target (the issue's): served p50, p95, p99 within 15%
of the simulated ones. Size: about 2 * seeds * duration seconds of wall time, plus profiling (10 s).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import httpx
from load_served import TOLERANCE, compare  # benchmarks/load_served.py: the same side-by-side lines

from agentsched.experiments.loadgen import run_against, summarize_shots
from agentsched.experiments.traffic import Machine, capacity_per_s, oracle_mappings, percentile, seeded_arrivals
from agentsched.model.live import StaticDecider
from agentsched.model.workflow import Mode
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.stream import run_stream

LOADS = (0.3, 0.6)
SLEEPS_MS = {"Nap50": 50, "Nap120": 120, "Nap200": 200, "Nap400": 400}
TOOLS = textwrap.dedent("""
    import time

    import agentsched


    def _nap(ms):
        class Nap(agentsched.Tool):
            name, has_gpu, tags, workload = f"nap{ms}", False, ("io-bound",), f"waits {ms} ms"
            input_names = ("request",)  # what the load generator sends with every invocation

            def example_inputs(self):
                return {"request": "profile"}

            def run(self, inputs):
                time.sleep(ms / 1000.0)
                return ms
        return Nap

""") + "".join(f"{cls} = _nap({ms})\n" for cls, ms in SLEEPS_MS.items())
WORKFLOWS = {
    "naps-chain": "tasks:\n  A: {tool: 'nap_tools:Nap50'}\n  B: {tool: 'nap_tools:Nap200'}\n"
    "  C: {tool: 'nap_tools:Nap50'}\nedges: [[A, B], [B, C]]\n",
    "naps-fan": "tasks:\n  A: {tool: 'nap_tools:Nap120'}\n  B: {tool: 'nap_tools:Nap400'}\n"
    "  C: {tool: 'nap_tools:Nap120'}\n  D: {tool: 'nap_tools:Nap50'}\n"
    "edges: [[A, D], [B, D], [C, D]]\n",
    "naps-one": "tasks:\n  A: {tool: 'nap_tools:Nap200'}\n",
}


def write_project(folder: Path) -> tuple[list[Path], Path]:
    """The tools module, the workflow files and the cards ``agentsched profile`` measures for them."""
    (folder / "nap_tools.py").write_text(TOOLS)
    files = []
    for name, body in WORKFLOWS.items():
        path = folder / f"{name}.yaml"
        path.write_text(f"name: {name}\n{body}")
        files.append(path)
    cards = folder / "nap_cards.json"
    tools = ",".join(f"nap_tools:{cls}" for cls in SLEEPS_MS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsched",
            "profile",
            "--tools",
            tools,
            "--out",
            str(cards),
            "--runs",
            "5",
            "--warmup",
            "1",
            "--busy",
            "ignore",
        ],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"profiling the tools failed: {done.stderr.strip()}")
    return files, cards


def simulated(wfs: list, streams: list, slots: int) -> dict:
    decider = StaticDecider({wf.name: {t: Mode.CPU for t in wf.task_ids} for wf in wfs}, "all-cpu")
    lat: list[float] = []
    oom = 0
    for seed, arrivals in enumerate(streams):
        res = run_stream(wfs, arrivals, decider, vram_budget_mb=None, cpu_slots=slots, noise_sigma=0.0, seed=seed)
        lat += res.latencies_ms()
        oom += res.count("oom")
    return {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99), "oom": oom}


def served(folder: Path, files: list[Path], cards: Path, streams: list, wfs: list, slots: int) -> dict:
    from serve_load import launch  # benchmarks/serve_load.py: a real server process

    proc, url = launch(
        [
            *map(str, files),
            "--store",
            str(folder / "served.db"),
            "--testbed",
            "local",
            "--cpu-slots",
            str(slots),
            "--cards",
            str(cards),
            "--max-concurrency",
            "100000",
        ],
        cwd=folder,
    )
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            for wf in wfs:  # the only mapping: every task on the CPU (the tools have no GPU code)
                mapping = {t: "cpu" for t in wf.task_ids}
                c.put(f"/v1/workflows/{wf.name}/mapping", json={"mapping": mapping}).raise_for_status()
        names = [wf.name for wf in wfs]
        shots = [
            s
            for arrivals in streams
            for s in run_against(url, arrivals, names, time_scale=1.0, inputs={"request": "load"})
        ]
        bad = [s for s in shots if s.status != "ok"]
        if bad:
            print(f"  {len(bad)} of {len(shots)} not ok, e.g. {bad[0].status}: {bad[0].message}")
    finally:
        proc.terminate()
        proc.wait(60)
    return summarize_shots(shots)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one stream of 20 s per load")
    ap.add_argument("--duration-s", type=float, default=60.0, help="seconds per stream (real time)")
    ap.add_argument("--seeds", type=int, default=2, help="streams per load (pooled)")
    ap.add_argument("--cpu-slots", type=int, default=4, help="the machine's CPU slots, on both sides")
    args = ap.parse_args()
    duration_s, seeds = (20.0, 1) if args.quick else (args.duration_s, args.seeds)
    met: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files, cards = write_project(folder)
        sys.path.insert(0, str(folder))  # the workflows name nap_tools:... (for their cards here)
        wfs = [resolve_workflow(str(f)).with_cards(str(cards)) for f in files]
        names = [wf.name for wf in wfs]
        machine = Machine(vram_budget_mb=None, cpu_slots=args.cpu_slots, noise_sigma=0.0)
        capacity, _ = capacity_per_s(wfs, machine, oracle_mappings(wfs, None), min(120.0, max(10.0, duration_s)))
        print(
            f"mix {', '.join(names)}; capacity {capacity:.3f}/s with {args.cpu_slots} CPU slots; {seeds} "
            f"stream(s) of {duration_s:g} s per load, served in real time"
        )
        for load in LOADS:
            streams = [seeded_arrivals("poisson", load * capacity, duration_s, names, seed) for seed in range(seeds)]
            sim = simulated(wfs, streams, args.cpu_slots)
            got = served(folder, files, cards, streams, wfs, args.cpu_slots)
            met += compare(load, sim, got)
    print(f"\n{sum(met)} of {len(met)} met (served percentile within {TOLERANCE:.0%} of the simulated one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
