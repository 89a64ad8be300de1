"""Open-loop HTTP load generator: an arrival stream fired at a running ``agentsched serve``.

The stream is the one ``agentsched load`` simulates (``seeded_arrivals``: the same kind, rate,
duration, workflow mix and seed give the same arrivals). Each arrival is sent as
``POST /v1/workflows/NAME/invocations`` at its *due* time: its simulated arrival time divided by
``time_scale`` (the server's ``--time-scale``: simulated ms per wall ms), counted from the start.

Open loop: a scheduler coroutine sleeps until each due time and starts that arrival's request as a
task of its own; it never waits for an answer, so a slow server does not delay later arrivals (a
closed-loop generator would, and would then under-report latency: coordinated omission). The
connection pool is unbounded for the same reason. An arrival's latency is its answer's time minus
its due time (not the moment it left: the generator's own lag counts against the service),
scaled back to simulated ms (x ``time_scale``).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentsched.errors import AgentschedError
from agentsched.experiments.traffic import percentile
from agentsched.testbeds.arrivals import Arrival

START_LEAD_S = 0.05  # the first due time is this far after the start: time to create the first tasks
DEFAULT_TIMEOUT_S = 600.0  # per request (wall): an invocation under overload may wait long


@dataclass(frozen=True, slots=True)
class Shot:
    """One arrival sent, and what came back."""

    arrival_ms: float  # its simulated arrival time (due time x time_scale)
    workflow: str
    lag_ms: float  # sent this much after its due time (simulated ms): the generator's own delay
    latency_ms: float | None  # due time -> answer (simulated ms); None when no answer came
    http_status: int | None  # None: no answer (connection error, timeout)
    status: str  # the invocation's ok / oom / error, "refused" (503), "http-NNN", or "no-answer"
    e2e_ms: float | None  # the E2E the server reported (its simulator's figure)
    invocation_id: int | None
    message: str = ""


async def fire(
    url: str,
    arrivals: Sequence[Arrival],
    names: Sequence[str],
    *,
    time_scale: float = 1.0,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    transport: Any = None,
    inputs: dict[str, Any] | None = None,
) -> list[Shot]:
    """Send every arrival at its due time (module docstring); the shots in arrival order. ``inputs``:
    the body's inputs of every invocation (a workflow of user tools takes some; built-in ones none)."""
    import httpx

    _check(arrivals, names, time_scale)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(
        base_url=url, timeout=timeout_s, limits=limits, headers=headers, transport=transport
    ) as client:
        t0 = loop.time() + START_LEAD_S
        tasks = []
        for a in sorted(arrivals, key=lambda a: a.time_ms):
            due_s = t0 + a.time_ms / 1000.0 / time_scale
            delay_s = due_s - loop.time()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            tasks.append(asyncio.create_task(_one(client, a, names[a.workflow], due_s, time_scale, inputs or {})))
        return list(await asyncio.gather(*tasks))


def run_against(url: str, arrivals: Sequence[Arrival], names: Sequence[str], **kwargs: Any) -> list[Shot]:
    """``fire`` from synchronous code (keyword arguments: ``fire``'s)."""
    return asyncio.run(fire(url, arrivals, names, **kwargs))


def _check(arrivals: Sequence[Arrival], names: Sequence[str], time_scale: float) -> None:
    if not (isinstance(time_scale, (int, float)) and 0 < time_scale < float("inf")):
        raise AgentschedError(f"time scale must be a finite number > 0, got {time_scale!r}")
    bad = [a.workflow for a in arrivals if not 0 <= a.workflow < len(names)]
    if bad:
        raise AgentschedError(f"an arrival names workflow #{bad[0]}; the mix has {len(names)}")


async def _one(client: Any, a: Arrival, name: str, due_s: float, time_scale: float, inputs: dict[str, Any]) -> Shot:
    import httpx

    loop = asyncio.get_running_loop()
    scale_ms = 1000.0 * time_scale  # wall seconds -> simulated ms
    lag_ms = (loop.time() - due_s) * scale_ms
    try:
        r = await client.post(f"/v1/workflows/{name}/invocations", json={"inputs": inputs})
    except httpx.HTTPError as e:
        return Shot(a.time_ms, name, lag_ms, None, None, "no-answer", None, None, f"{type(e).__name__}: {e}"[:200])
    latency_ms = (loop.time() - due_s) * scale_ms
    try:
        doc = r.json()
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    if r.status_code == 200:
        return Shot(
            a.time_ms,
            name,
            lag_ms,
            latency_ms,
            200,
            str(doc.get("status")),
            doc.get("e2e_ms"),
            doc.get("invocation_id"),
            str(doc.get("message") or ""),
        )
    status = "refused" if r.status_code == 503 else f"http-{r.status_code}"
    return Shot(
        a.time_ms, name, lag_ms, latency_ms, r.status_code, status, None, None, str(doc.get("detail", ""))[:200]
    )


def summarize_shots(shots: Sequence[Shot]) -> dict[str, Any]:
    """Counts by outcome and percentiles (simulated ms) over the invocations that completed: the
    client's latency, the server's reported E2E, and the generator's send lag (every shot)."""
    ok = [s for s in shots if s.status == "ok"]
    lat = [s.latency_ms for s in ok if s.latency_ms is not None]
    e2e = [s.e2e_ms for s in ok if s.e2e_ms is not None]
    lag = [s.lag_ms for s in shots]

    def pct(xs: list[float], q: float) -> float | None:
        v = percentile(xs, q)
        return None if v is None else round(v, 3)

    counts = {k: sum(1 for s in shots if s.status == k) for k in ("ok", "oom", "error", "refused", "no-answer")}
    return {
        "sent": len(shots),
        **counts,
        "other": len(shots) - sum(counts.values()),
        "p50_ms": pct(lat, 0.5),
        "p95_ms": pct(lat, 0.95),
        "p99_ms": pct(lat, 0.99),
        "e2e_p50_ms": pct(e2e, 0.5),
        "e2e_p95_ms": pct(e2e, 0.95),
        "e2e_p99_ms": pct(e2e, 0.99),
        "overhead_ms_mean": round(
            statistics.fmean(
                s.latency_ms - s.e2e_ms
                for s in ok  # type: ignore[operator]
                if s.latency_ms is not None and s.e2e_ms is not None
            ),
            3,
        )
        if e2e
        else None,
        "lag_ms_p50": pct(lag, 0.5),
        "lag_ms_max": round(max(lag), 3) if lag else None,
        "first_failure": _first_failure(shots),
    }


# what an invocation the service ran may end as: ok, or oom (its mapping ran out of VRAM: under load,
# a finding of the run, counted beside ok in the table); error, refused, no answer and any other
# HTTP answer mean the workflow did not run as asked
RAN = ("ok", "oom")


def none_ran(summary: dict[str, Any]) -> bool:
    """True when arrivals were sent and the service ran none of them (``summarize_shots``' counts):
    a stream refused wholesale or a service gone, not a measurement."""
    return summary["sent"] > 0 and not any(summary[k] for k in RAN)


def _first_failure(shots: Sequence[Shot]) -> str | None:
    """What the first arrival not answered ``ok`` got (its outcome and the server's one line), so a
    stream refused wholesale (a 422 for a missing input) says why; None when every one was ok."""
    bad = next((s for s in shots if s.status != "ok"), None)
    if bad is None:
        return None
    return f"{bad.workflow}: {bad.status}: {bad.message}" if bad.message else f"{bad.workflow}: {bad.status}"
