"""The read routes (workflows, history, mapping) and the mapping's pin and unpin."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from agentsched.errors import MappingError
from agentsched.service.deps import engine_of, json_body, request_body
from agentsched.service.protocol import HistoryRow, MappingRequest, MappingView, WorkflowView
from agentsched.service.views import describe, history, mapping_view

MAX_HISTORY_LIMIT = 10_000  # rows per history answer (one JSON body in memory)


def view_routes(v1: APIRouter) -> None:
    @v1.get(
        "/workflows",
        summary="Served workflows: policy, current and best mapping, invocations",
        response_model=list[WorkflowView],
    )
    async def workflows(request: Request) -> list[WorkflowView]:
        engine = engine_of(request)
        return [describe(engine, n) for n in engine.runtimes]

    @v1.get(
        "/workflows/{name}/history",
        summary="The last invocations a workflow's learner recorded",
        response_model=list[HistoryRow],
    )
    async def get_history(
        name: str, request: Request, limit: int = Query(100, ge=1, le=MAX_HISTORY_LIMIT)
    ) -> list[HistoryRow]:
        engine = engine_of(request)
        engine.runtime(name)
        return await anyio.to_thread.run_sync(history, engine, name, limit)

    @v1.get(
        "/workflows/{name}/mapping",
        summary="The mapping invocations run under now, and the best one",
        response_model=MappingView,
    )
    async def get_mapping(name: str, request: Request) -> MappingView:
        return mapping_view(engine_of(request), name)

    @v1.put(
        "/workflows/{name}/mapping",
        summary="Pin a mapping: every invocation runs it, learning stops",
        response_model=MappingView,
        openapi_extra=request_body(MappingRequest),
    )
    async def pin(name: str, request: Request) -> MappingView | JSONResponse:
        engine = engine_of(request)
        rt = engine.runtime(name)  # 404 before the body is read
        body: MappingRequest = await json_body(request, MappingRequest)
        try:
            rt.pin(dict(body.mapping))
        except MappingError as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        return mapping_view(engine, name)

    @v1.delete("/workflows/{name}/mapping", summary="Unpin: the learner takes over again", response_model=MappingView)
    async def unpin(name: str, request: Request) -> MappingView:
        engine = engine_of(request)
        engine.runtime(name).unpin()
        return mapping_view(engine, name)
