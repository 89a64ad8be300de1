"""The open-loop load generator against an in-process mock service (no network)."""

from __future__ import annotations

import asyncio

import pytest

httpx = pytest.importorskip("httpx")

from agentsched.experiments.loadgen import fire, none_ran, run_against, summarize_shots  # noqa: E402
from agentsched.experiments.traffic import seeded_arrivals  # noqa: E402
from agentsched.testbeds.arrivals import Arrival  # noqa: E402

NAMES = ["S1", "S7"]
HOLD_S = 30.0  # bounds how long the slow first answer waits for the others; not a timing check


def test_a_slow_server_does_not_delay_later_arrivals():
    """The first answer comes only once every later arrival has reached the server: a generator
    that waited for answers before sending the next arrival would never get there."""
    arrivals = [Arrival(10.0 * i, i % 2) for i in range(12)]
    seen: list[str] = []

    async def main() -> list:
        everyone_in = asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request.url.path)
            if len(seen) == len(arrivals):
                everyone_in.set()
            if len(seen) == 1:  # the slow one
                try:
                    await asyncio.wait_for(everyone_in.wait(), HOLD_S)
                except TimeoutError:
                    return httpx.Response(500, json={"detail": "later arrivals never came"})
            return httpx.Response(200, json={"status": "ok", "e2e_ms": 5.0, "invocation_id": len(seen)})

        return await fire("http://svc", arrivals, NAMES, transport=httpx.MockTransport(handler))

    shots = asyncio.run(main())
    assert [s.status for s in shots] == ["ok"] * len(arrivals)
    assert shots[0].latency_ms > max(s.latency_ms for s in shots[1:])  # it waited for the rest
    assert seen == [f"/v1/workflows/{NAMES[a.workflow]}/invocations" for a in arrivals]  # sent in due order


def test_the_stream_is_the_same_under_a_seed_and_fired_as_drawn():
    a = seeded_arrivals("poisson", 40.0, 0.5, NAMES, seed=3)
    assert a == seeded_arrivals("poisson", 40.0, 0.5, NAMES, seed=3)
    assert a != seeded_arrivals("poisson", 40.0, 0.5, NAMES, seed=4)
    got: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        got.append(request.url.path.split("/")[3])
        return httpx.Response(200, json={"status": "ok", "e2e_ms": 1.0, "invocation_id": len(got)})

    shots = run_against("http://svc", a, NAMES, time_scale=1000.0, transport=httpx.MockTransport(handler))
    assert [s.arrival_ms for s in shots] == [x.time_ms for x in a]
    assert got == [NAMES[x.workflow] for x in a]
    assert all(s.latency_ms is not None and s.latency_ms >= 0 for s in shots)


def test_every_invocation_carries_the_inputs_given_and_none_by_default():
    import json

    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"status": "ok", "e2e_ms": 1.0, "invocation_id": len(bodies)})

    arrivals = [Arrival(float(i), 0) for i in range(3)]
    run_against(
        "http://svc",
        arrivals,
        ["S1"],
        time_scale=1000.0,
        transport=httpx.MockTransport(handler),
        inputs={"text": "hello"},
    )
    run_against("http://svc", arrivals[:1], ["S1"], time_scale=1000.0, transport=httpx.MockTransport(handler))
    assert bodies == [{"inputs": {"text": "hello"}}] * 3 + [{"inputs": {}}]


def test_answers_are_counted_by_outcome():
    arrivals = [Arrival(float(i), 0) for i in range(5)]
    answers = iter(
        [
            httpx.Response(200, json={"status": "ok", "e2e_ms": 3.0, "invocation_id": 1}),
            httpx.Response(200, json={"status": "oom", "e2e_ms": None, "invocation_id": 2}),
            httpx.Response(503, json={"detail": "busy"}),
            httpx.Response(404, json={"detail": "unknown workflow"}),
            httpx.Response(200, json={"status": "ok", "e2e_ms": 4.0, "invocation_id": 3}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers)

    shots = run_against("http://svc", arrivals, ["S1"], time_scale=1000.0, transport=httpx.MockTransport(handler))
    s = summarize_shots(shots)
    assert (s["sent"], s["ok"], s["oom"], s["refused"], s["other"]) == (5, 2, 1, 1, 1)
    assert s["e2e_p50_ms"] in (3.0, 4.0) and s["p50_ms"] is not None


def _summary(*answers: httpx.Response | None) -> dict:
    """``summarize_shots`` of one arrival per answer (None: the connection fails)."""
    replies = iter(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        reply = next(replies)
        if reply is None:
            raise httpx.ConnectError("connection refused", request=request)
        return reply

    arrivals = [Arrival(float(i), 0) for i in range(len(answers))]
    return summarize_shots(
        run_against("http://svc", arrivals, ["S1"], time_scale=1000.0, transport=httpx.MockTransport(handler))
    )


def test_a_stream_fails_when_the_service_ran_none_of_it():
    oom = httpx.Response(200, json={"status": "oom", "e2e_ms": None, "invocation_id": 1})
    assert not none_ran(_summary(oom, oom))  # the service ran them: an overloaded placement is a finding
    assert not none_ran(_summary(httpx.Response(503, json={"detail": "busy"}), oom))
    assert not none_ran(_summary())  # nothing sent, nothing failed
    refused = _summary(httpx.Response(422, json={"detail": "invocation is missing input(s)"}), None)
    assert none_ran(refused) and refused["first_failure"] == "S1: http-422: invocation is missing input(s)"
    assert none_ran(_summary(None)) and none_ran(
        _summary(httpx.Response(200, json={"status": "error", "e2e_ms": None, "invocation_id": 1}))
    )


def test_bad_arguments_are_one_line_errors():
    from agentsched.errors import AgentschedError

    with pytest.raises(AgentschedError, match="time scale"):
        run_against("http://svc", [Arrival(0.0, 0)], ["S1"], time_scale=0.0)
    with pytest.raises(AgentschedError, match="workflow #1"):
        run_against("http://svc", [Arrival(0.0, 1)], ["S1"])
