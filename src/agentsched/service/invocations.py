"""The invocation route: admitted by the engine's one gate, run in its own thread, answered with a
bounded JSON document (``bounded.py``) rendered off the event loop, or with the shutdown's cut."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from agentsched.errors import AgentschedError, ToolError, one_line
from agentsched.runtime.runtime import InvokeResult
from agentsched.service.admission import Flight, Refusal
from agentsched.service.bounded import MARK, bounded, bounded_text, dumps
from agentsched.service.config import ServiceConfig
from agentsched.service.deps import engine_of, json_body, request_body
from agentsched.service.engine import Engine
from agentsched.service.protocol import InvocationRequest, InvocationResponse

RETRY_AFTER_BUSY_S = 1  # over the concurrency limit: a slot frees within a typical invocation


def invocation_routes(v1: APIRouter) -> None:
    @v1.post(
        "/workflows/{name}/invocations",
        summary="Run the workflow once",
        response_model=InvocationResponse,
        openapi_extra=request_body(InvocationRequest),
    )
    async def invoke(name: str, request: Request) -> Response:
        engine = engine_of(request)
        engine.runtime(name)  # 404 before the body is read
        body: InvocationRequest = await json_body(request, InvocationRequest)
        try:
            engine.check_inputs(name, body.inputs)
        except ToolError as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        flight = engine.admit(name)
        if isinstance(flight, Refusal):
            draining = flight is Refusal.DRAINING
            retry = max(1, int(engine.config.drain_s)) if draining else RETRY_AFTER_BUSY_S
            why = (
                "draining: not taking new invocations"
                if draining
                else (f"busy: {engine.config.max_concurrency} invocations in flight")
            )
            return JSONResponse({"detail": why}, status_code=503, headers={"Retry-After": str(retry)})
        metrics = request.app.state.metrics
        t0 = time.perf_counter()
        try:
            res = await _until_cut(engine, flight, body.inputs)
        except AgentschedError as e:  # the runtime stopped (closing, or its store failed)
            metrics.observe(name, "unavailable", time.perf_counter() - t0)
            return JSONResponse(
                {"detail": f"workflow {name}: {e}"}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_BUSY_S)}
            )
        finally:
            engine.answered(flight)
        metrics.observe(name, res.status.value, time.perf_counter() - t0)
        content = await anyio.to_thread.run_sync(answer, res, engine.config)
        return Response(content, media_type="application/json")


async def _until_cut(engine: Engine, flight: Flight, inputs: dict[str, Any]) -> InvokeResult:
    """The invocation's result, or the shutdown's cut record when the drain's time ran out first
    (its thread is then abandoned: its tool may never end)."""
    loop = asyncio.get_running_loop()
    cut: asyncio.Future[None] = loop.create_future()
    flight.on_cut(lambda: _call_soon(loop, lambda: cut.done() or cut.set_result(None)))
    work = asyncio.wrap_future(engine.start(flight, inputs))
    await asyncio.wait({work, cut}, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        cut.cancel()
        return work.result()
    work.cancel()
    assert flight.cut is not None
    return flight.cut


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any) -> None:
    """``fn`` on ``loop`` from another thread; nothing when the loop already closed (a forced exit:
    nobody is left to answer)."""
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:
        pass


def answer(res: InvokeResult, config: ServiceConfig) -> bytes:
    """``res`` as the JSON answer: outputs, timeline and message bounded, each cut marked and listed.
    Blocking (a large output takes a while): run it off the event loop. It never raises for what a
    tool returned: the invocation is recorded, and its caller gets its id."""
    outputs, cut = bounded(res.outputs, config.max_output_bytes, "outputs")
    timeline, timeline_cut = bounded(list(res.timeline), config.max_output_bytes, "timeline")
    message, message_cut = bounded_text(res.message, config.max_message_chars)
    doc = {
        "invocation_id": res.invocation_id,
        "status": res.status.value,
        "outputs": outputs,
        "mapping": {t: getattr(m, "value", m) for t, m in res.mapping.items()},
        "e2e_ms": res.e2e_ms,
        "timeline": timeline,
        "message": message,
        "kind": res.kind,
        "round": res.round,
        "cut": cut
        + timeline_cut
        + ([f"message: cut at {config.max_message_chars:,} characters"] if message_cut else []),
    }
    try:
        return dumps(doc)
    except Exception as e:  # noqa: BLE001 - a value bounded() let through: still answered, marked
        why = f"the answer could not be encoded: {one_line(e)}"
        return dumps(
            {
                **doc,
                "outputs": {MARK: why},
                "timeline": [],
                "message": bounded_text(res.message, 200)[0],
                "e2e_ms": None,
                "cut": [f"outputs: {why}"],
            }
        )
