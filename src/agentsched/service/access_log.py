"""One log line per request (logger ``agentsched.access``): client, method, path, status, wall ms.

The query string is left out (it is not needed to follow the traffic), and so is every header: a
token never reaches the log.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentsched.masking import printable

log = logging.getLogger("agentsched.access")


class AccessLog:
    """Pure ASGI middleware (no body buffering: a streamed answer stays streamed)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [0]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            who = f"{client[0]}:{client[1]}" if client else "-"
            path = printable(str(scope.get("path", ""))[:200])
            log.info(
                '%s "%s %s" %s %.1f ms',
                who,
                scope.get("method", "-"),
                path,
                status[0] or "-",
                (time.perf_counter() - t0) * 1000.0,
            )
