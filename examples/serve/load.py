"""Concurrent load on `agentsched serve`: N clients, each sending its share of invocations.

python load.py [--url http://127.0.0.1:8000] [--clients 32] [--requests 1000] [--workflow wordstats]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter

import httpx


async def client(c: httpx.AsyncClient, workflow: str, n: int, codes: Counter, latencies: list[float]) -> None:
    for i in range(n):
        t0 = time.perf_counter()
        r = await c.post(f"/v1/workflows/{workflow}/invocations", json={"inputs": {"text": f"request {i} of load"}})
        latencies.append((time.perf_counter() - t0) * 1000)
        codes[r.status_code if r.status_code != 200 else r.json()["status"]] += 1


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--workflow", default="wordstats")
    a = ap.parse_args()
    codes: Counter = Counter()
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=a.clients)
    async with httpx.AsyncClient(base_url=a.url, timeout=300, limits=limits) as c:
        t0 = time.perf_counter()
        # the requests shared out: the first (requests % clients) clients send one more
        await asyncio.gather(
            *(
                client(c, a.workflow, a.requests // a.clients + (i < a.requests % a.clients), codes, latencies)
                for i in range(a.clients)
            )
        )
        wall_s = time.perf_counter() - t0
    print(
        f"{len(latencies)} invocations in {wall_s:.2f} s: {len(latencies) / wall_s:.0f}/s; "
        f"latency p50 {statistics.median(latencies):.1f} ms; answers {dict(codes)}"
    )


if __name__ == "__main__":
    asyncio.run(main())
