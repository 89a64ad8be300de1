"""A long-running placement service: many workflows, concurrent invocations, warm tools, one store
(``agentsched serve``; docs/serve.md). Needs the ``serve`` extra (FastAPI, uvicorn, prometheus_client)."""

from agentsched.service.service import Service, ServiceConfig

__all__ = ["Service", "ServiceConfig"]
