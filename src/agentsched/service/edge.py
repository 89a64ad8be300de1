"""The server's edge against slow and many clients: uvicorn's HTTP/1.1 protocol (h11) with a
deadline for a request's head and a cap on open connections, and one line for a failed accept().

* **Head deadline.** A connection must deliver a whole request line and its headers within
  ``header_timeout_s`` of opening, or of sending the first byte of its next request; else it is
  closed. Without it, clients that never finish their headers (slowloris) hold every descriptor.
  (An idle kept-alive connection is uvicorn's ``timeout_keep_alive``'s.)
* **Connection cap.** A connection over ``max_connections`` is answered 503 and closed at once,
  before anything is read: the process never runs out of descriptors.
* **accept() failures** (out of descriptors all the same: another process's, a lower ulimit) are
  logged as one line, the first and then every ``ACCEPT_LOG_EVERY``-th, never as a traceback each.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("agentsched.service")

ACCEPT_LOG_EVERY = 1000
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: 56\r\n\r\n" + b'{"detail": "too many connections: try again in a while"}'
)


def edge_protocol(*, header_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with this head deadline and connection cap (``uvicorn.Config(http=...)``)."""

    class EdgeProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self.head_timer: asyncio.TimerHandle | None = None
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(REFUSED)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # a next request's head has begun: it has the same deadline
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.head_timer is None:
                self.head_timer = asyncio.get_running_loop().call_later(header_timeout_s, self._head_late)

        def _disarm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _head_late(self) -> None:
            self.head_timer = None
            if self.conn.their_state is h11.IDLE:  # still no whole request head
                self.transport.close()

    return EdgeProtocol


class AcceptErrors:
    """A loop exception handler: a failed accept() is one line now and then; the rest as asyncio's."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
            self.count += 1
            if self.count % ACCEPT_LOG_EVERY == 1:
                log.error(
                    "accept() failed (%s), %d time(s) so far: new connections wait (too many open files? "
                    "lower --max-connections or raise the descriptor limit, ulimit -n)",
                    exc.strerror or exc,
                    self.count,
                )
            return
        loop.default_exception_handler(context)
