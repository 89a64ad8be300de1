"""A long-running placement service: many workflows, concurrent invocations, warm tools, one store
(``agentsched serve``; docs/serve.md). Needs the ``serve`` extra (FastAPI, uvicorn, prometheus_client).

``config.ServiceConfig`` (what to serve, validated once), ``engine.Engine`` (the runtimes, the one
admission gate, the shared machine, the cut), ``app.create_app`` (the HTTP API; its lifespan builds
the engine), ``server.serve`` (uvicorn, the drain, the edge).
"""

from agentsched.service.config import ServiceConfig
from agentsched.service.engine import Engine

__all__ = ["Engine", "ServiceConfig"]
