"""Loopback stand-ins for LLM servers (127.0.0.1, port 0), for the llm reasoner's tests.

* ``MIMICS``: the chat route of OpenAI, vLLM, llama.cpp's server, llama-cpp-python's server and
  Ollama, each with the acceptance rules of the real server for structured output (which fields it
  rejects, with what status and message, and where it honours a JSON schema) and the ``owned_by``
  its ``GET /v1/models`` says. The llama-cpp-python rules were measured against a real server
  (0.3.x: ``json_schema`` refused with HTTP 500, ``json_object`` + ``schema`` honoured); the others
  follow the servers' documentation and were not run here (docs/agent.md, the conformance table).
  A mimic answers with the mapping the honoured schema itself dictates (each task's first enum
  value) and, without a schema, with ``{}``, what a tiny model answers: an answer is valid only
  when the schema reached the place where the server reads it.
* ``RawServer``: any bytes, optionally trickled one byte at a time (the status line and headers
  too), for deadlines, bodies that are not JSON, oversized bodies and echoed headers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentsched.agent.local_llm import ChatServer, completion, error_body


def link_of(body: dict[str, Any]) -> str:
    """Which link of the structured-output chain a request body uses."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        return "json_object+schema" if fmt.get("type") == "json_object" and "schema" in fmt else str(fmt.get("type"))
    for key in ("guided_json", "format"):
        if key in body:
            return key
    return "plain"


def schema_answer(schema: dict[str, Any]) -> str:
    """The answer a server constrained by ``schema`` could give: each task its first allowed mode."""
    mapping = schema["properties"]["mapping"]
    return json.dumps(
        {"mapping": {t: mapping["properties"][t]["enum"][0] for t in mapping["required"]}, "reason": "constrained"}
    )


UNCONSTRAINED = "{}"  # a tiny model's answer without a schema


def _fmt(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format")
    return fmt if isinstance(fmt, dict) else {}


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = _fmt(body)
    return (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None


@dataclass(frozen=True)
class Mimic:
    """A server kind's acceptance rules. ``reject(body)``: (status, message) or None; ``schema(body)``:
    the JSON schema it constrains decoding with, or None."""

    name: str  # the conformance table's row
    owned_by: str  # what its GET /v1/models says
    reject: Callable[[dict[str, Any]], tuple[int, str] | None]
    schema: Callable[[dict[str, Any]], dict[str, Any] | None]

    def backend(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        refused = self.reject(body)
        if refused is not None:
            return refused[0], error_body(refused[1])
        schema = self.schema(body)
        return 200, completion(schema_answer(schema) if schema else UNCONSTRAINED, "mimic")

    def serve(self) -> ChatServer:
        return ChatServer(lambda body: self.backend(body), model="mimic", owned_by=self.owned_by).start()


def _openai_reject(body: dict[str, Any]) -> tuple[int, str] | None:
    for key in ("guided_json", "format"):  # strict request validation
        if key in body:
            return 400, f"Unrecognized request argument supplied: {key}"
    fmt = _fmt(body)
    if fmt and fmt.get("type") not in ("text", "json_object", "json_schema"):
        return 400, f"Invalid value: '{fmt.get('type')}'. Supported values are: 'json_object', 'json_schema', 'text'."
    if fmt.get("type") == "json_object" and set(fmt) - {"type"}:
        return 400, "Unrecognized request argument supplied: response_format.schema"
    return None


def _only_text_or_json_object(status: int, model: str) -> Callable[[dict[str, Any]], tuple[int, str] | None]:
    """A pydantic-validated server whose response_format type may only be text or json_object."""

    def reject(body: dict[str, Any]) -> tuple[int, str] | None:
        kind = _fmt(body).get("type")
        if kind is not None and kind not in ("text", "json_object"):
            return status, (
                f"1 validation error for {model} response_format.type Input should be 'text' or "
                f"'json_object' [type=literal_error, input_value='{kind}', input_type=str]"
            )
        return None

    return reject


def _json_object_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = _fmt(body)
    return fmt.get("schema") if fmt.get("type") == "json_object" else None


def _ollama_old_reject(body: dict[str, Any]) -> tuple[int, str] | None:
    kind = _fmt(body).get("type")
    if kind is not None and kind not in ("text", "json_object"):
        return 400, f"invalid response_format type: {kind}"
    return None


def _no_rejection(body: dict[str, Any]) -> None:
    return None


MIMICS: dict[str, Mimic] = {
    m.name: m
    for m in (
        Mimic("openai", "system", _openai_reject, _json_schema),
        # vLLM ignores unknown fields, also inside json_object: only its own guided_json carries a schema there
        Mimic("vllm", "vllm", _no_rejection, lambda b: _json_schema(b) or b.get("guided_json")),
        Mimic(
            "vllm-old", "vllm", _only_text_or_json_object(400, "ChatCompletionRequest"), lambda b: b.get("guided_json")
        ),
        Mimic("llama.cpp", "llamacpp", _no_rejection, lambda b: _json_schema(b) or _json_object_schema(b)),
        Mimic(
            "llama-cpp-python", "me", _only_text_or_json_object(500, "CreateChatCompletionRequest"), _json_object_schema
        ),
        Mimic("ollama", "library", _no_rejection, _json_schema),
        Mimic("ollama-old", "library", _ollama_old_reject, lambda b: b.get("format")),
    )
}


class RawServer:
    """An HTTP server on 127.0.0.1 that answers every request with ``respond(handler)`` -> (status,
    body bytes), sent at once or, with ``trickle_s``, one byte every ``trickle_s`` seconds (from the
    status line on with ``trickle_headers``). ``requests``: (method, path, headers) of each request."""

    def __init__(
        self,
        respond: Callable[[BaseHTTPRequestHandler], tuple[int, bytes]],
        *,
        trickle_s: float = 0.0,
        trickle_headers: bool = False,
        content_length: bool = True,
    ) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                server.requests.append((self.command, self.path, dict(self.headers)))
                status, data = respond(self)
                head = [f"HTTP/1.1 {status} X", "Content-Type: application/json", "Connection: close"]
                if content_length:
                    head.append(f"Content-Length: {len(data)}")
                raw_head = ("\r\n".join(head) + "\r\n\r\n").encode()
                try:
                    if trickle_headers:
                        server._trickle(self.wfile, raw_head + data, trickle_s)
                    else:
                        self.wfile.write(raw_head)
                        server._trickle(self.wfile, data, trickle_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up
                self.close_connection = True

            do_GET = do_POST = _answer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _trickle(self, out: Any, data: bytes, every_s: float) -> None:
        if every_s <= 0:
            out.write(data)
            return
        for i in range(len(data)):
            if self.stopping.wait(every_s):
                return
            out.write(data[i : i + 1])
            out.flush()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
