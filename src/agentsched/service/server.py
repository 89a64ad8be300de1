"""Run the service under uvicorn, with a drain on SIGTERM (and Ctrl-C).

The first SIGTERM/SIGINT starts a drain: new invocations get 503 (Retry-After), the accepted ones
get up to ``drain_s`` to finish, then uvicorn stops (it waits for open responses to be written) and
the app's lifespan closes the engine (runtimes, store); the process exits 0. Invocations still
running when ``drain_s`` ends are cut (``Engine.cut``): each is recorded as ``error`` ("cut by
shutdown after drain-s") and its caller gets that record, so every accepted invocation is
recorded; their tools are abandoned (the CLI exits without waiting for them). A second signal
cuts at once what still runs (the same records and answers, "cut by a second shutdown signal"); a
third, once the cut has answered (or ``CUT_ANSWER_S`` after it began), stops without answering
(uvicorn's own forced exit). Each is said on stderr (the drain, the cut, the stop), as is every
request (``access_log.py``). The edge against slow and many clients is ``edge.py``'s.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from agentsched.errors import AgentschedError
from agentsched.service.app import create_app
from agentsched.service.config import ServiceConfig
from agentsched.service.cut import SECOND_SIGNAL_MESSAGE
from agentsched.service.edge import AcceptErrors, edge_protocol
from agentsched.service.engine import Engine

log = logging.getLogger("agentsched.service")


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, insecure: bool) -> None:
    """Refuse to expose the API beyond this machine without a token (unless told to)."""
    if not is_loopback(host) and token is None and not insecure:
        raise AgentschedError(
            f"--host {host} is not a loopback address: give --token-file FILE (clients send "
            "'Authorization: Bearer TOKEN'), or --insecure to serve without one"
        )


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a port out of range, taken, or an address not of this
    machine is a one-line error before minutes of replay (uvicorn would print a traceback, or its
    own log line and exit 3, after them)."""
    if not 0 <= port <= 65535:
        raise AgentschedError(f"--port must be 0-65535, got {port}")
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise AgentschedError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds its own
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise AgentschedError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def read_token(path: Any) -> str:
    from agentsched.model.files import read_small_text

    try:
        token = read_small_text(path, "--token-file").strip()
    except ValueError as e:
        raise AgentschedError(str(e)) from None
    if not token or any(c.isspace() for c in token):
        raise AgentschedError(f"--token-file {path}: expected one token (no spaces) on one line")
    return token


CUT_ANSWER_S = 5.0  # a third signal within this long of the second waits for the cut's answers


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI, drain_s: float) -> None:
        super().__init__(config)
        self.app = app
        self.drain_s = drain_s
        self.startup_error: AgentschedError | None = None  # the engine could not be built
        self._draining = False
        self._cut_started_s: float | None = None  # when a second signal started the cut
        self._cut_done = False

    @property
    def engine(self) -> Engine | None:
        return self.app.state.engine

    def failed(self, error: AgentschedError) -> None:
        """The app's lifespan could not build the engine: stop before listening; ``serve`` raises it."""
        self.startup_error = error

    # uvicorn's own handler records the signal and raises it again once stopped (the process then dies
    # of it); a drained service exits 0 instead, so the signal is handled here, not recorded
    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.engine is None:  # still starting (the replay): stop once it is done
            self.should_exit = True
        elif self._cut_started_s is not None:  # a third signal: stop at once, answered or not...
            # ...but not while the cut is answering (Ctrl-C pressed three times fast): a forced exit
            # then would turn the cut records already written into HTTP 500s
            if not self._cut_done and time.monotonic() - self._cut_started_s < CUT_ANSWER_S:
                log.warning("the cut is answering the invocations in flight; a signal after it stops at once")
                return
            log.warning("third signal: stopping now")
            self.should_exit = self.force_exit = True
        elif self._draining:  # a second: cut what still runs now (each answered with its cut record)
            self._cut_started_s = time.monotonic()
            threading.Thread(target=self._cut_now, name="agentsched-cut", daemon=True).start()
        else:
            self._draining = True
            log.warning(
                "draining: %d invocation(s) in flight get up to %gs to finish; new ones get 503 (a second "
                "signal cuts them now)",
                self.engine.in_flight,
                self.drain_s,
            )
            threading.Thread(target=self._drain, name="agentsched-drain", daemon=True).start()

    def _cut_now(self) -> None:
        assert self.engine is not None
        n = self.engine.cut(SECOND_SIGNAL_MESSAGE)
        log.warning("second signal: %d invocation(s) still running were cut (recorded as error); stopping", n)
        self._cut_done = True
        self.should_exit = True

    def _drain(self) -> None:
        assert self.engine is not None
        if self.engine.drain(self.drain_s):
            log.warning("drained: every accepted invocation answered; stopping")
        else:
            n = self.engine.cut()
            log.warning(
                "drain: %d invocation(s) still running after %gs were cut (recorded as error); stopping",
                n,
                self.drain_s,
            )
        self.should_exit = True

    async def startup(self, sockets: Any = None) -> None:
        asyncio.get_running_loop().set_exception_handler(AcceptErrors())
        lifespan_startup = self.lifespan.startup

        async def then_check() -> None:  # a failed engine: uvicorn exits before it listens
            await lifespan_startup()
            if self.startup_error is not None:
                await self.lifespan.shutdown()  # the app's lifespan ends, rather than being cancelled
                self.lifespan.should_exit = True

        self.lifespan.startup = then_check  # type: ignore[method-assign]
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                host = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in a URL (RFC 3986)
                print(
                    f"agentsched serve: listening on http://{host}:{port} "
                    f"({len(self.engine.runtimes) if self.engine else 0} workflow(s))",
                    file=sys.stderr,
                    flush=True,
                )

    async def shutdown(self, sockets: Any = None) -> None:
        await super().shutdown(sockets)
        log.warning("stopped")


def serve(
    config: ServiceConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    insecure: bool = False,
    log_level: str = "warning",
    access_log: bool = True,
    exit_after_cut: bool = False,
) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (0 after a drain). ``exit_after_cut``: when
    the drain cut invocations, end the process here (the store is closed) rather than wait at exit
    for tools still running in their abandoned threads (the CLI's choice; a library caller's
    process is not ours to end)."""
    check_bind(host, token, insecure)
    sock = listen_socket(host, port)
    holder: list[_DrainingServer] = []
    app = create_app(config, token=token, access_log=access_log, on_startup_error=lambda e: holder[0].failed(e))
    uv = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(config.drain_s) + 1),
        timeout_keep_alive=max(1, round(config.keep_alive_s)),
        http=edge_protocol(header_timeout_s=config.header_timeout_s, max_connections=config.max_connections),
    )
    server = _DrainingServer(uv, app, config.drain_s)
    holder.append(server)
    try:
        server.run(sockets=[sock])
    except SystemExit:
        if server.startup_error is None:
            raise
    finally:
        sock.close()
    if server.startup_error is not None:
        raise server.startup_error
    code = 0 if server.started else 1
    cut = app.state.engine.cut_count if app.state.engine is not None else 0
    if exit_after_cut and cut:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
