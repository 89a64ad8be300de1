"""What every route asks for: the app's engine, and a JSON body read the service's way."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import HTTPException, Request

from agentsched.service.body import parse, read_capped
from agentsched.service.engine import Engine


def engine_of(request: Request) -> Engine:
    """The app's engine (503 while there is none: starting, or its start failed)."""
    engine = request.app.state.engine
    if engine is None:
        raise HTTPException(503, "the service is not ready", {"Retry-After": "1"})
    return engine


async def json_body(request: Request, model: type[Any]) -> Any:
    """The request's body as ``model``: read within the cap, parsed and validated off the event loop
    (``body.py``). Call it after the token was checked: a route's own code runs after the router's."""
    engine = engine_of(request)
    raw = await read_capped(request, engine.config.max_body_bytes)
    return await anyio.to_thread.run_sync(parse, raw, request.headers.get("content-type", ""), model)


def request_body(model: type[Any]) -> dict[str, Any]:
    """A route's ``openapi_extra`` naming its JSON body's schema (the body is read by ``json_body``)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}
