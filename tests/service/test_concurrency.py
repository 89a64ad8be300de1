"""64 concurrent requests over 3 workflows, through a real server process and real HTTP clients."""

from __future__ import annotations

import asyncio

import httpx

from tests.service.conftest import EXAMPLE_WORKFLOWS

N_REQUESTS = 64


async def _fire(url: str, jobs: list[tuple[str, dict]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=N_REQUESTS, max_keepalive_connections=N_REQUESTS)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        return await asyncio.gather(
            *(client.post(f"/v1/workflows/{wf}/invocations", json={"inputs": inputs}) for wf, inputs in jobs)
        )


def _history_ids(client: httpx.Client, wf: str) -> set[int]:
    r = client.get(f"/v1/workflows/{wf}/history", params={"limit": 1000})
    assert r.status_code == 200
    return {h["invocation_id"] for h in r.json()}


def _alone(wf: str, mapping: dict[str, str]) -> str:
    """The status of ``mapping`` simulated alone, with nothing beside it."""
    from agentsched.model.workflow import Mode
    from agentsched.scenarios import load_scenario
    from agentsched.testbeds.spec import TestbedSpec

    tb = TestbedSpec(kind="sim").build()
    try:
        return tb.run(load_scenario(wf), {t: Mode(m) for t, m in mapping.items()}).status.value
    finally:
        tb.close()


def test_64_concurrent_over_3_simulated_workflows_in_real_time(start_server, tmp_path):
    server = start_server(
        [
            "S1",
            "S2",
            "S3",
            "--store",
            str(tmp_path / "s.db"),
            "--testbed",
            "sim",
            "--realtime",
            "--max-concurrency",
            "64",
        ]
    )
    names = ("S1", "S2", "S3")
    jobs = [(names[i % 3], {}) for i in range(N_REQUESTS)]
    responses = asyncio.run(_fire(server.url, jobs))
    assert [r.status_code for r in responses] == [200] * N_REQUESTS
    docs = [r.json() for r in responses]
    ids = [d["invocation_id"] for d in docs]
    assert len(set(ids)) == N_REQUESTS  # none lost, none answered twice
    with server.client() as client:
        tasks = {w["name"]: w["tasks"] for w in client.get("/v1/workflows").json()}
        for (wf, _), d in zip(jobs, docs, strict=True):
            assert set(d["mapping"]) == set(tasks[wf])
            assert d["status"] in ("ok", "oom", "error")
            assert "shared budget" not in d["message"]  # co-scheduling never over the shared VRAM
            if d["status"] == "ok":
                assert d["e2e_ms"] > 0 and {s["task"] for s in d["timeline"]} == set(tasks[wf])
        for wf in names:  # history complete: exactly the answered invocations, each under its workflow
            mine = {d["invocation_id"] for (w, _), d in zip(jobs, docs, strict=True) if w == wf}
            assert mine == _history_ids(client, wf)
        metrics = client.get("/metrics").text
    for (wf, _), d in zip(jobs, docs, strict=True):  # no OOM caused by co-scheduling: each is its mapping's own
        if d["status"] == "oom":
            assert _alone(wf, d["mapping"]) == "oom", (wf, d["mapping"], d["message"])
    peak = float(next(ln.split()[-1] for ln in metrics.splitlines() if ln.startswith("agentsched_vram_peak_mb")))
    budget = float(next(ln.split()[-1] for ln in metrics.splitlines() if ln.startswith("agentsched_vram_budget_mb")))
    assert 0 < peak <= budget
    assert 'agentsched_invocations_total{status="ok",workflow="S1"}' in metrics
    assert server.stop() == 0


def test_64_concurrent_over_3_local_workflows(start_server, tmp_path):
    server = start_server(
        [str(EXAMPLE_WORKFLOWS), "S1", "--store", str(tmp_path / "l.db"), "--testbed", "local", "--size", "small"],
        cwd=EXAMPLE_WORKFLOWS,
    )
    texts = [" ".join(f"w{j}" * (1 + j % 3) for j in range(i % 7 + 1)) for i in range(N_REQUESTS)]
    jobs = [
        ("wordstats", {"text": t}) if i % 3 == 0 else ("shout", {"text": t}) if i % 3 == 1 else ("S1", {})
        for i, t in enumerate(texts)
    ]
    responses = asyncio.run(_fire(server.url, jobs))
    assert [r.status_code for r in responses] == [200] * N_REQUESTS
    docs = [r.json() for r in responses]
    assert len({d["invocation_id"] for d in docs}) == N_REQUESTS
    for (wf, inputs), d in zip(jobs, docs, strict=True):
        assert d["status"] == "ok", d["message"]
        if wf == "wordstats":  # answered correctly, each with its own input
            words = inputs["text"].split()
            assert d["outputs"] == {"summary": {"count": len(words), "longest": max(words, key=len)}}
        elif wf == "shout":
            assert d["outputs"] == {"shout": inputs["text"].upper()}
    with server.client() as client:
        for wf in ("wordstats", "shout", "S1"):
            mine = {d["invocation_id"] for (w, _), d in zip(jobs, docs, strict=True) if w == wf}
            assert mine == _history_ids(client, wf)
    assert server.stop() == 0
