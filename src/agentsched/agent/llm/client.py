"""JSON over HTTP with a whole-request deadline and a cap on what is read.

Why not an HTTP library's timeout: those bound each socket operation, so an endpoint that trickles a
byte every 2 s never times out. Here a watchdog shuts the socket down at the deadline, whatever
phase the request is in (connect, send, headers, body). A response longer than ``max_bytes`` is not
read further; a body that is not JSON is an error, not a traceback.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from agentsched.agent.llm.config import one_line
from agentsched.agent.secrets import basic_token
from agentsched.errors import AgentschedError

_CHUNK_BYTES = 64 * 1024
_USER_AGENT = "agentsched"


class EndpointError(AgentschedError):
    """A request that got no usable answer. ``reason`` is a clause ("connection refused", "HTTP 500:
    boom"); ``unreachable``: the endpoint was not reached (refused, timed out), ``permanent``: asking
    again cannot help."""

    unreachable = False
    permanent = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EndpointTimeout(EndpointError):
    unreachable = True


class EndpointUnreachable(EndpointError):
    unreachable = True


class EndpointStatus(EndpointError):
    """An HTTP error status, with the server's own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status
        self.message = message


class BadResponse(EndpointError):
    """A 2xx answer that cannot be used: not JSON, too large, cut short."""


class NotACompletion(BadResponse):
    """JSON, but not a chat completion: the route is not a chat endpoint."""

    permanent = True


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the decoded JSON (2xx), or the error's body (a dict, or the text)


def with_route(base_url: str, route: str) -> str:
    """``route`` (``/chat/completions``) under the path of ``base_url``, its query kept after it:
    an endpoint root such as Azure's ``https://host/openai/v1?api-version=...`` (appended to the
    whole URL, the route landed in the query, and every request was a 404)."""
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + route, fragment=""))


def request_json(method: str, url: str, body: Any = None, *, api_key: str, deadline_s: float, max_bytes: int) -> Any:
    """The decoded JSON of a 2xx answer to ``method url`` (with ``body`` as JSON); EndpointError
    subclasses for everything else. The whole exchange ends within ``deadline_s``."""
    reply = _exchange(method, url, body, api_key=api_key, deadline_s=deadline_s, max_bytes=max_bytes)
    if reply.status >= 300:
        raise EndpointStatus(reply.status, status_message(reply.body))
    return reply.body


def _exchange(method: str, url: str, body: Any, *, api_key: str, deadline_s: float, max_bytes: int) -> Reply:
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": _USER_AGENT,
        "Authorization": _authorization(url, api_key),
    }
    data = None if body is None else json.dumps(body).encode()
    if parts.scheme.lower() == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=deadline_s, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=deadline_s)
    expired = threading.Event()
    # the connected socket, held here: http.client lets go of conn.sock once the response owns it
    held: list[socket.socket] = []

    def cut() -> None:  # the deadline: unblock whatever the request is waiting for
        expired.set()  # first, so that a socket connected after this check is seen as expired
        for sock in list(held):
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also under TLS
            except OSError:
                pass

    watchdog = threading.Timer(deadline_s, cut)
    watchdog.daemon = True
    started = time.monotonic()
    watchdog.start()
    resp: http.client.HTTPResponse | None = None
    try:
        conn.connect()
        held.append(conn.sock)
        if expired.is_set():
            raise TimeoutError
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = _read_capped(resp, max_bytes)
        status = resp.status
    except BadResponse:
        raise
    except Exception as e:  # noqa: BLE001 - sorted into one clause below; never a traceback
        if (
            expired.is_set()
            or isinstance(e, (TimeoutError, socket.timeout))
            or time.monotonic() - started >= deadline_s
        ):
            raise EndpointTimeout(f"no answer within {deadline_s:g} s") from None
        raise EndpointUnreachable(connection_reason(e)) from None
    finally:
        watchdog.cancel()
        if resp is not None:
            resp.close()  # unread bytes of an oversized answer are dropped with the connection
        conn.close()
    if expired.is_set():  # the cut raced with the last byte: the deadline passed all the same
        raise EndpointTimeout(f"no answer within {deadline_s:g} s")
    return Reply(status, _decode(raw, status))


def _authorization(url: str, api_key: str) -> str:
    """Basic auth for credentials in the URL (a proxy in front of the server), else the bearer key."""
    token = basic_token(url)
    return f"Basic {token}" if token is not None else f"Bearer {api_key}"


def _read_capped(resp: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The response body, or BadResponse once it exceeds ``max_bytes`` (the rest is never read)."""
    too_large = BadResponse(f"the answer is larger than {_size(max_bytes)} (llm max_response_bytes)")
    length = resp.getheader("Content-Length") or ""
    if length.strip().isdigit() and int(length) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    n = 0
    while True:
        chunk = resp.read1(_CHUNK_BYTES)
        if not chunk:
            return b"".join(chunks)
        n += len(chunk)
        if n > max_bytes:
            raise too_large
        chunks.append(chunk)


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _decode(raw: bytes, status: int) -> Any:
    """JSON of a 2xx body (BadResponse when it is not JSON); an error body as JSON or as its text."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        if status >= 300:
            return text
        raise BadResponse(f"the answer is not JSON ({one_line(e)})") from None


def status_message(body: Any) -> str:
    """The server's own message in an error body, one line of at most 200 characters ('' if none)."""
    msg: Any = None
    if isinstance(body, dict):
        msg = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(msg, dict):
            msg = msg.get("message")
    elif isinstance(body, str):
        msg = body
    return " ".join(str(msg or "").split())[:200]


def connection_reason(e: BaseException) -> str:
    """'connection refused' and the like, from an error and its chain."""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        nxt = cause.__cause__ or cause.__context__
        if nxt is None:
            break
        cause = nxt
    return one_line(cause if cause is not None and str(cause).strip() else e)
