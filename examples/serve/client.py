"""A Python client of `agentsched serve` (httpx): invoke, read what was learned, pin and unpin.

python client.py [--url http://127.0.0.1:8000] [--token-file F]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--token-file", type=Path, help="the server's --token-file")
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.token_file.read_text().strip()}"} if a.token_file else {}
    with httpx.Client(base_url=a.url, headers=headers, timeout=120) as c:
        r = c.post("/v1/workflows/wordstats/invocations", json={"inputs": {"text": "the quick brown fox jumps"}})
        r.raise_for_status()
        d = r.json()
        print(f"invocation {d['invocation_id']}: {d['status']}, E2E {d['e2e_ms']:.2f} ms, mapping {d['mapping']}")
        print(f"outputs: {d['outputs']}")
        for w in c.get("/v1/workflows").json():
            print(f"{w['name']}: policy {w['policy']}, {w['invocations']} invocations, best {w['best_mapping']}")
        c.put("/v1/workflows/shout/mapping", json={"mapping": {"shout": "cpu"}}).raise_for_status()
        d = c.post("/v1/workflows/shout/invocations", json={"inputs": {"text": "pinned"}}).json()
        print(f"pinned: {d['kind']} {d['mapping']} -> {d['outputs']}")
        c.delete("/v1/workflows/shout/mapping").raise_for_status()
        for h in c.get("/v1/workflows/shout/history", params={"limit": 3}).json():
            print(f"history: #{h['invocation_id']} {h['kind']} {h['status']} {h['e2e_ms']} ms")


if __name__ == "__main__":
    main()
