"""The HTTP API of ``agentsched serve`` (FastAPI; OpenAPI docs at /docs and /openapi.json).

``create_app(service, token=...)`` builds the app around a ``Service``; its lifespan closes the
service (runtimes, testbeds, store) at shutdown. Invocations run in worker threads (``Runtime.invoke``
blocks), at most ``max_concurrency`` at a time; the rest get 503 with Retry-After, as do all while
draining. With a token, every /v1 route and /metrics need ``Authorization: Bearer TOKEN`` (compared
in constant time; /healthz and the docs stay open, they reveal nothing learned).
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentsched.errors import AgentschedError, MappingError, ToolError, one_line, validation_line
from agentsched.masking import printable
from agentsched.runtime.runtime import InvokeResult
from agentsched.service.metrics import Metrics
from agentsched.service.service import Service, UnknownWorkflowError, jsonable

MAX_HISTORY_LIMIT = 10_000  # rows per history answer (one JSON body in memory)
RETRY_AFTER_BUSY_S = 1  # over the concurrency limit: a slot frees within a typical invocation


class InvocationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt "inputs" must not run with none

    inputs: dict[str, Any] = Field(default_factory=dict, description="argument name -> value, given to every "
                                                                     "source task")


class MappingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mapping: dict[str, str] = Field(..., description="task id -> cpu | gpu_now | gpu_queue (every task)")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


def _body_problem(content_type: str, errors: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The status and one line for a request FastAPI could not read. Why not its own line: a body
    sent without ``content-type: application/json`` (curl's -d alone sends a form type) was answered
    "body: Input should be a valid dictionary ...", which does not say what to change."""
    media = content_type.split(";", 1)[0].strip().lower()
    about_body = any(tuple(e.get("loc", ()))[:1] == ("body",) for e in errors)
    missing = [tuple(e.get("loc", ())) for e in errors] == [("body",)] and errors[0].get("type") == "missing"
    if missing:
        return 422, "the request body is missing: send a JSON object (content-type: application/json)"
    if about_body and media != "application/json" and not media.endswith("+json"):
        return 415, ("the request body must be JSON (content-type: application/json), got "
                     + (f"content-type {printable(media[:80])!r}" if media else "no content-type"))
    return 422, validation_line(errors)


PARSE_FAILED = "There was an error parsing the body"  # FastAPI's 400 when decoding raised (not a JSON syntax error)


def _unparsable(cause: BaseException | None) -> str:
    """One line for a body FastAPI's JSON decoding raised on (before, a bare 400 with its line above)."""
    if isinstance(cause, UnicodeDecodeError):
        return "the request body is not valid JSON: it is not UTF-8"
    if isinstance(cause, RecursionError):
        return "the request body cannot be read: it is nested too deep"
    if isinstance(cause, ValueError) and "digits" in str(cause):  # Python's int-string conversion limit
        return f"the request body cannot be read: a number in it has more than {sys.get_int_max_str_digits()} digits"
    return f"the request body cannot be read: {one_line(cause) if cause is not None else 'unknown error'}"


def create_app(service: Service, *, token: str | None = None) -> FastAPI:
    """The API around ``service`` (see the module docstring)."""
    metrics = Metrics(service)
    limiter = anyio.CapacityLimiter(service.config.max_concurrency)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()  # after the server stopped taking requests: flushes and closes the store

    app = FastAPI(title="agentsched", summary="Placement service: run workflows, learn where each tool runs",
                  lifespan=lifespan)

    async def authorize(request: Request) -> None:  # async: no worker thread per request
        if token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise HTTPException(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])

    @app.exception_handler(UnknownWorkflowError)
    async def unknown_workflow(request: Request, exc: UnknownWorkflowError) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(*_body_problem(request.headers.get("content-type", ""), exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_problem(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == PARSE_FAILED:
            return _error(422, _unparsable(exc.__cause__))
        return await http_exception_handler(request, exc)

    _invocation_route(v1, service, metrics, limiter)
    _view_routes(v1, service)
    app.include_router(v1)

    @app.get("/healthz", summary="Liveness: ok, or draining")
    async def healthz() -> Any:
        # time_scale: what a load generator's clock must match (simulated ms per wall ms; 1 unless realtime)
        return {"status": "draining" if service.draining else "ok", "workflows": len(service.runtimes),
                "in_flight": service.in_flight, "time_scale": service.config.time_scale}

    @app.get("/metrics", summary="Prometheus metrics", dependencies=[Depends(authorize)])
    async def prometheus() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return app


def _invocation_route(v1: APIRouter, service: Service, metrics: Metrics, limiter: anyio.CapacityLimiter) -> None:
    @v1.post("/workflows/{name}/invocations", summary="Run the workflow once")
    async def invoke(name: str, body: InvocationIn) -> Any:
        service.runtime(name)  # 404 before admission
        try:
            service.check_inputs(name, body.inputs)
        except ToolError as e:
            return _error(422, str(e))
        refused = service.admit()
        if refused is not None:
            retry = max(1, int(service.config.drain_s)) if refused == "draining" else RETRY_AFTER_BUSY_S
            return _error(503, "draining: not taking new invocations" if refused == "draining"
                          else f"busy: {service.config.max_concurrency} invocations in flight",
                          {"Retry-After": str(retry)})
        t0 = time.perf_counter()
        try:
            res = await _invoke_until_cut(service, name, body.inputs, limiter)
        except AgentschedError as e:  # the runtime stopped (closing, or its store failed)
            metrics.observe(name, "unavailable", time.perf_counter() - t0)
            return _error(503, f"workflow {name}: {e}", {"Retry-After": str(RETRY_AFTER_BUSY_S)})
        finally:
            service.release()
        metrics.observe(name, res.status.value, time.perf_counter() - t0)
        return JSONResponse(jsonable({
            "invocation_id": res.invocation_id, "status": res.status.value, "outputs": res.outputs,
            "mapping": {t: m.value for t, m in res.mapping.items()}, "e2e_ms": res.e2e_ms,
            "timeline": list(res.timeline), "message": res.message, "kind": res.kind, "round": res.round}))


async def _invoke_until_cut(service: Service, name: str, inputs: dict[str, Any],
                            limiter: anyio.CapacityLimiter) -> InvokeResult:
    """Run the invocation in a worker thread; answer with its result, or with the shutdown's cut
    record when the drain's time ran out first (the thread is then abandoned: its tool may never end)."""
    loop = asyncio.get_running_loop()
    cut: asyncio.Future[None] = loop.create_future()
    flight = service.begin(name)
    flight.on_cut(lambda: _call_soon(loop, lambda: cut.done() or cut.set_result(None)))
    work = asyncio.ensure_future(anyio.to_thread.run_sync(service.invoke, name, inputs, flight, limiter=limiter,
                                                          abandon_on_cancel=True))
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


def _view_routes(v1: APIRouter, service: Service) -> None:
    @v1.get("/workflows", summary="Served workflows: policy, current and best mapping, invocations")
    async def workflows() -> Any:
        return [service.describe(n) for n in service.runtimes]

    @v1.get("/workflows/{name}/history", summary="The last invocations a workflow's learner recorded")
    async def history(name: str, limit: int = Query(100, ge=1, le=MAX_HISTORY_LIMIT)) -> Any:
        service.runtime(name)
        return jsonable(await anyio.to_thread.run_sync(service.history, name, limit))

    @v1.get("/workflows/{name}/mapping", summary="The mapping invocations run under now, and the best one")
    async def get_mapping(name: str) -> Any:
        d = service.describe(name)
        return {k: d[k] for k in ("name", "pinned", "current_mapping", "best_mapping", "best_e2e_ms")}

    @v1.put("/workflows/{name}/mapping", summary="Pin a mapping: every invocation runs it, learning stops")
    async def pin(name: str, body: MappingIn) -> Any:
        rt = service.runtime(name)
        try:
            rt.pin(body.mapping)
        except MappingError as e:
            return _error(422, str(e))
        return await get_mapping(name)

    @v1.delete("/workflows/{name}/mapping", summary="Unpin: the learner takes over again")
    async def unpin(name: str) -> Any:
        service.runtime(name).unpin()
        return await get_mapping(name)
