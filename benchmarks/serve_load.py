"""Load on ``agentsched serve``: service overhead per invocation and throughput (issue 18).

    python benchmarks/serve_load.py [--requests 2000] [--clients 32] [--quick] [--rag N]

Starts a real server process on 127.0.0.1 (local testbed) serving the trivial-tool workflows of
examples/serve/workflows (wordstats: 4 string tools; shout: 1), with a store in a temporary folder,
and drives it with httpx clients from this process:

* overhead: one client, sequential invocations of wordstats; per invocation, the client-observed
  latency minus the tools' own E2E (the response's ``e2e_ms``). Target: p50 <= 5 ms.
* throughput: ``--clients`` concurrent clients (asyncio, one connection each) over both workflows;
  answered invocations per second of wall time. Target: >= 200/s.
* ``--rag N``: examples/rag (real MiniLM tools) served warm; per invocation, the client's time over
  the tools' E2E, and the tool loads during them (the server's /metrics). Target: p50 <= 1.2x (no
  reload between invocations).

The clients share the machine with the server (on a 2-core machine they take CPU from it): the
figures are what one box serving itself measures, a lower bound for a remote client.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "examples" / "serve" / "workflows"
TEXT = " ".join(f"word{i % 97}" * (1 + i % 4) for i in range(200))


def start_server(
    db: Path, round_size: int, policy: str | None = None, workflows: Path = WORKFLOWS
) -> tuple[subprocess.Popen, str]:
    """``agentsched serve`` on 127.0.0.1 (a free port), run from the workflows' folder (their tool modules)."""
    return launch(
        [
            str(workflows),
            "--store",
            str(db),
            "--testbed",
            "local",
            "--max-concurrency",
            "256",
            "--round-size",
            str(round_size),
            *(["--policy", policy] if policy else []),
        ],
        cwd=workflows if workflows.is_dir() else workflows.parent,
    )


def launch(serve_args: list[str], cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """``agentsched serve SERVE_ARGS --port 0`` as a real process of this checkout; its URL once it
    listens (its log before that is passed on to stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsched", "serve", *serve_args, "--port", "0"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if not url and "listening on " in line:
                url.append(line.split("listening on ", 1)[1].split()[0])
                ready.set()
            elif not url:
                sys.stderr.write(line)
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(300)
    if not url:
        proc.kill()
        raise SystemExit("server did not start")
    return proc, url[0]


def overhead(url: str, n: int) -> dict[str, float]:
    extra, e2e = [], []
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(n + 20):
            t0 = time.perf_counter()
            r = c.post("/v1/workflows/wordstats/invocations", json={"inputs": {"text": TEXT}})
            wall_ms = (time.perf_counter() - t0) * 1000
            d = r.json()
            if r.status_code != 200 or d["status"] != "ok":
                raise SystemExit(f"invocation failed: {r.status_code} {d}")
            if i >= 20:  # warm-up: the first rounds (connections, the planner's first proposals)
                extra.append(wall_ms - d["e2e_ms"])
                e2e.append(d["e2e_ms"])
    q = statistics.quantiles(extra, n=100)
    return {
        "n": n,
        "overhead_p50_ms": statistics.median(extra),
        "overhead_p99_ms": q[98],
        "tools_e2e_p50_ms": statistics.median(e2e),
    }


async def _client(c: httpx.AsyncClient, jobs: list[tuple[str, str]], counts: dict[str, int]) -> None:
    for wf, text in jobs:
        r = await c.post(f"/v1/workflows/{wf}/invocations", json={"inputs": {"text": text}})
        counts["ok" if r.status_code == 200 and r.json()["status"] == "ok" else "failed"] += 1


async def throughput(url: str, requests: int, clients: int) -> dict[str, float]:
    per = requests // clients
    counts = {"ok": 0, "failed": 0}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as c:
        await asyncio.gather(*(c.get("/healthz") for _ in range(clients)))  # open the connections first
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                _client(c, [("wordstats" if (k + j) % 2 else "shout", TEXT) for j in range(per)], counts)
                for k in range(clients)
            )
        )
        wall_s = time.perf_counter() - t0
    return {
        "clients": clients,
        "invocations": per * clients,
        "ok": counts["ok"],
        "failed": counts["failed"],
        "wall_s": wall_s,
        "invocations_per_s": counts["ok"] / wall_s,
    }


def warm_rag(n: int) -> dict[str, float]:
    """examples/rag through the service: client time per invocation over the tools' E2E, warm."""
    rag = ROOT / "examples" / "rag"
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        subprocess.run([sys.executable, "make_docs.py", str(docs)], cwd=rag, check=True, capture_output=True)
        proc, url = start_server(Path(tmp) / "rag.db", 5, workflows=rag / "rag.yaml")
        walls, e2es = [], []
        loads: list[float] = []  # the pool's tool loads (/metrics) after the warm-up and at the end
        try:
            with httpx.Client(base_url=url, timeout=600) as c:
                for i in range(n + 3):
                    if i == 3:
                        loads.append(_metric(c, "agentsched_tool_loads"))
                    t0 = time.perf_counter()
                    r = c.post(
                        "/v1/workflows/rag/invocations",
                        json={"inputs": {"docs": str(docs), "question": "How are the mirrors cleaned?"}},
                    )
                    wall_ms = (time.perf_counter() - t0) * 1000
                    d = r.json()
                    if r.status_code != 200 or d["status"] != "ok":
                        raise SystemExit(f"rag invocation failed: {r.status_code} {d}")
                    if i >= 3:  # the first invocations load the models
                        walls.append(wall_ms)
                        e2es.append(d["e2e_ms"])
                loads.append(_metric(c, "agentsched_tool_loads"))
        finally:
            proc.terminate()
            proc.wait(120)
    ratios = [w / e for w, e in zip(walls, e2es, strict=True)]
    return {
        "n": n,
        "wall_p50_ms": statistics.median(walls),
        "e2e_p50_ms": statistics.median(e2es),
        "ratio_p50": statistics.median(ratios),
        "loads": loads[1] - loads[0],
    }


def _metric(c: httpx.Client, name: str) -> float:
    """One unlabelled value of the server's /metrics."""
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise SystemExit(f"/metrics has no {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="throughput phase: invocations in all")
    ap.add_argument("--overhead-n", type=int, default=300, help="overhead phase: sequential invocations")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--round-size", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="200 + 100 invocations (a smoke run)")
    ap.add_argument(
        "--rag",
        type=int,
        default=0,
        metavar="N",
        help="also N warm invocations of examples/rag (needs the tools extra)",
    )
    a = ap.parse_args()
    if a.quick:
        a.requests, a.overhead_n = 200, 100
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "serve.db", a.round_size)
        try:
            o = overhead(url, a.overhead_n)
            t = asyncio.run(throughput(url, a.requests, a.clients))
        finally:
            proc.terminate()
            rc = proc.wait(120)
    print(
        f"overhead (1 client, {o['n']} invocations of wordstats): p50 {o['overhead_p50_ms']:.2f} ms, "
        f"p99 {o['overhead_p99_ms']:.2f} ms above the tools' own E2E (p50 {o['tools_e2e_p50_ms']:.2f} ms); "
        f"target p50 <= 5 ms: {'met' if o['overhead_p50_ms'] <= 5 else 'MISSED'}"
    )
    print(
        f"throughput ({t['clients']} clients, {t['invocations']} invocations over 2 workflows): "
        f"{t['invocations_per_s']:.0f} invocations/s ({t['ok']} ok, {t['failed']} failed, {t['wall_s']:.1f} s); "
        f"target >= 200/s: {'met' if t['invocations_per_s'] >= 200 else 'MISSED'}"
    )
    print(f"server exit status after SIGTERM: {rc}")
    if a.rag:
        g = warm_rag(a.rag)
        print(
            f"warm rag ({g['n']} invocations after 3 warm-up): client time p50 {g['wall_p50_ms']:.1f} ms, "
            f"tools' E2E p50 {g['e2e_p50_ms']:.1f} ms, per-invocation ratio p50 {g['ratio_p50']:.2f}x, "
            f"{g['loads']:.0f} tool load(s) during them; "
            f"target <= 1.2x: {'met' if g['ratio_p50'] <= 1.2 else 'MISSED'}"
        )
    if t["failed"] or rc != 0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
