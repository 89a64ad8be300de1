"""Soak: memory and time per invocation of a long-running ``Runtime`` (issue 22).

    python benchmarks/soak.py [--invocations 100000] [--window 10000] [--policy agent-rules] [--service]

The wordstats workflow of examples/serve (4 trivial user tools: a fan-out of string work on a
2,000-word input) runs
``--invocations`` times through one ``Runtime`` on the local testbed, with a store in a temporary
folder. Per window of ``--window`` invocations it prints the peak RSS of the process (MB, from
``resource.getrusage``; Linux reports kB) and the p50/p99 wall time of ``invoke`` (ms). Targets,
side by side in this one run:

* peak memory after the last window <= 1.5x the peak after the first 1,000 invocations;
* time flat: the last window's p50 <= 1.2x the second window's p50.

``--service``: the same through ``agentsched serve`` (a real server process on 127.0.0.1, local
testbed, the same workflow, one httpx client sending invocations
one after another); the peak RSS is the server process's (``VmHWM``), the time the client's
request time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agentsched

# the wordstats workflow of examples/serve (four trivial tools), the same in-process and through the service
WORKFLOWS = Path(__file__).resolve().parents[1] / "examples" / "serve" / "workflows"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


class Windows:
    """Per-invocation times, summarised at 1,000 and at every ``window`` invocations."""

    def __init__(self, window: int, peak_mb: Any) -> None:
        self.window, self.peak_mb = window, peak_mb
        self.rows: list[dict[str, float]] = []
        self.times: list[float] = []

    def add(self, i: int, ms: float) -> None:
        self.times.append(ms)
        if i == 1000 or i % self.window == 0:
            q = statistics.quantiles(self.times, n=100)
            self.rows.append(
                {
                    "invocations": i,
                    "peak_rss_mb": self.peak_mb(),
                    "p50_ms": statistics.median(self.times),
                    "p99_ms": q[98],
                }
            )
            r = self.rows[-1]
            print(
                f"{i:>8} invocations: peak RSS {r['peak_rss_mb']:.1f} MB, invoke p50 {r['p50_ms']:.2f} ms, "
                f"p99 {r['p99_ms']:.2f} ms",
                flush=True,
            )
            self.times = []


def soak_service(invocations: int, window: int, policy: str) -> list[dict[str, float]]:
    import httpx
    from serve_load import start_server  # benchmarks/serve_load.py: a real server process

    text = " ".join(f"word{i % 97}" for i in range(2000))
    with tempfile.TemporaryDirectory() as d:
        proc, url = start_server(Path(d) / "soak.db", 5, policy=policy)

        def server_peak_mb() -> float:  # the server's high-water RSS (kB in /proc)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM:"))) / 1024.0

        w = Windows(window, server_peak_mb)
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                for i in range(1, invocations + 1):
                    t0 = time.perf_counter()
                    r = c.post("/v1/workflows/wordstats/invocations", json={"inputs": {"text": text}})
                    w.add(i, (time.perf_counter() - t0) * 1e3)
                    if r.status_code != 200 or r.json()["status"] != "ok":
                        sys.exit(f"invocation {i} failed: {r.status_code} {r.text[:300]}")
        finally:
            proc.terminate()
            proc.wait(120)
    return w.rows


def soak(invocations: int, window: int, policy: str) -> list[dict[str, float]]:
    sys.path.insert(0, str(WORKFLOWS))  # its tools are named by import path (serve_tools:Split, ...)
    wf = agentsched.load_workflow_file(WORKFLOWS / "wordstats.yaml")
    text = " ".join(f"word{i % 97}" for i in range(2000))
    w = Windows(window, peak_rss_mb)
    with (
        tempfile.TemporaryDirectory() as d,
        agentsched.Runtime(wf, policy=policy, store=Path(d) / "soak.db", testbed="local") as rt,
    ):
        for i in range(1, invocations + 1):
            t0 = time.perf_counter()
            res = rt.invoke(text=text)
            w.add(i, (time.perf_counter() - t0) * 1e3)
            if not res.ok:
                sys.exit(f"invocation {i} failed: {res.message}")
    return w.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--invocations", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--policy", default="agent-rules")
    ap.add_argument("--service", action="store_true", help="through agentsched serve (a real server process)")
    a = ap.parse_args()
    if a.invocations < 2 * a.window or a.window < 1000:
        sys.exit("--invocations must be at least two windows, and --window at least 1000")
    rows = (soak_service if a.service else soak)(a.invocations, a.window, a.policy)
    first = next(r for r in rows if r["invocations"] == 1000)
    windows = [r for r in rows if r["invocations"] % a.window == 0]
    mem = windows[-1]["peak_rss_mb"] / first["peak_rss_mb"]
    flat = windows[-1]["p50_ms"] / windows[1]["p50_ms"]
    print(
        f"\npeak RSS after {windows[-1]['invocations']} / after 1000: {mem:.2f}x (target <= 1.5x: "
        f"{'met' if mem <= 1.5 else 'missed'})"
    )
    print(
        f"p50 of the last window / the second window: {flat:.2f}x (target <= 1.2x: "
        f"{'met' if flat <= 1.2 else 'missed'})"
    )


if __name__ == "__main__":
    main()
