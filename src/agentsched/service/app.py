"""The HTTP API of ``agentsched serve`` (FastAPI; OpenAPI docs at /docs and /openapi.json).

``create_app(config, token=...)`` returns the app; its lifespan builds the ``Engine`` (replaying
every learner) and keeps it on ``app.state.engine``, and closes it at shutdown. An invocation is
admitted by the engine's one gate and runs in its own thread; over the limit, and while draining,
503 with Retry-After. With a token, every /v1 route and /metrics need ``Authorization: Bearer
TOKEN`` (compared in constant time, before any byte of the body is read; /healthz and the docs
stay open, they reveal nothing learned). Every route declares its response model.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from agentsched.errors import AgentschedError, validation_line
from agentsched.service.access_log import AccessLog
from agentsched.service.config import ServiceConfig
from agentsched.service.deps import engine_of
from agentsched.service.engine import Engine, UnknownWorkflowError
from agentsched.service.invocations import invocation_routes
from agentsched.service.metrics import Metrics
from agentsched.service.protocol import ErrorResponse, Health, InvocationRequest, MappingRequest
from agentsched.service.view_routes import view_routes
from agentsched.service.views import health
from agentsched.testbeds.tool_pool import ToolPool

ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (401, 404, 413, 415, 422, 503)}


def create_app(
    config: ServiceConfig,
    *,
    token: str | None = None,
    pool: ToolPool | None = None,
    access_log: bool = True,
    on_startup_error: Callable[[AgentschedError], None] | None = None,
) -> FastAPI:
    """The API serving ``config`` (see the module docstring). ``pool``: the local testbed's warm
    tools (None: the engine's own). ``access_log``: a line per request (logger ``agentsched.access``).
    ``on_startup_error``: told of a one-line error building the
    engine, instead of the lifespan raising it (the server then stops before it listens)."""

    app = FastAPI(
        title="agentsched",
        summary="Placement service: run workflows, learn where each tool runs",
        lifespan=_lifespan(config, pool, on_startup_error),
        responses=ERRORS,
    )
    app.state.engine = None
    if access_log:
        app.add_middleware(AccessLog)

    authorize = _authorizer(token)

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])

    @app.exception_handler(UnknownWorkflowError)
    async def unknown_workflow(request: Request, exc: UnknownWorkflowError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_line(exc.errors())}, status_code=422)

    invocation_routes(v1)
    view_routes(v1)
    app.include_router(v1)

    @app.get("/healthz", summary="Liveness: ok, or draining", response_model=Health)
    async def healthz(request: Request) -> Health:
        return health(request.app.state.engine)

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        dependencies=[Depends(authorize)],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def prometheus(request: Request) -> Response:
        engine_of(request)
        body, content_type = request.app.state.metrics.render()
        return Response(body, media_type=content_type)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _lifespan(
    config: ServiceConfig, pool: ToolPool | None, on_startup_error: Callable[[AgentschedError], None] | None
) -> Callable[[FastAPI], Any]:
    """The app's lifespan: the engine built (off the event loop: a long replay leaves signals to be
    handled) and kept on ``app.state``, closed at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine: Engine | None = None
        try:
            engine = await anyio.to_thread.run_sync(lambda: Engine(config, pool=pool))
        except AgentschedError as e:
            if on_startup_error is None:
                raise
            on_startup_error(e)
        if engine is None:  # (yielded outside the handler: a shutdown then is not "during" the error)
            yield
            return
        app.state.engine = engine
        app.state.metrics = Metrics(engine)
        try:
            yield
        finally:
            engine.close()  # after the server stopped taking requests: flushes and closes the store

    return lifespan


def _authorizer(token: str | None) -> Callable[[Request], Any]:
    """The dependency checking ``Authorization: Bearer TOKEN`` (nothing without a token)."""

    async def authorize(request: Request) -> None:  # async: no worker thread per request
        if token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise HTTPException(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

    return authorize


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the request models read by hand (``json_body``) in its schemas."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in (InvocationRequest, MappingRequest):
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            schemas[model.__name__] = schema
        app.openapi_schema = doc
    return app.openapi_schema
