"""A local OpenAI-compatible chat endpoint, so the ``llm`` reasoner can run with no network.

``ChatServer`` serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) on 127.0.0.1 from a
Python callable, in a background thread. ``serve_gguf`` backs it with a GGUF model loaded by
llama-cpp-python (the optional extra: ``pip install 'agentsched[local-llm]'``), imported lazily.
The llm reasoner also accepts ``--llm-base-url gguf:/path/model.gguf`` and starts one itself.

Tiny models (under a few billion parameters) reason poorly about placements: they often break the
JSON contract or ignore the evidence, and the rules reasoner then decides those rounds.
Use them to exercise the pipeline offline, not to judge the method (docs/agent.md).
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError

# (request body) -> (HTTP status, response body)
ChatBackend = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]

GGUF_SCHEME = "gguf:"  # --llm-base-url gguf:/path/model.gguf starts a local server


def completion(content: str, model: str, finish_reason: str = "stop") -> dict[str, Any]:
    """An OpenAI chat.completion body carrying ``content``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class ChatServer:
    """An OpenAI-compatible chat endpoint on the loopback interface, served from ``backend``."""

    def __init__(
        self,
        backend: ChatBackend,
        *,
        model: str = "local",
        host: str = "127.0.0.1",
        port: int = 0,
        owned_by: str = "agentsched",
    ) -> None:
        self.backend = backend  # turns a request body into (status, response body)
        self.model = model  # name listed by GET /v1/models
        self.owned_by = owned_by  # how GET /v1/models names the server (each server kind says its own name)
        self.requests: list[dict[str, Any]] = []  # every chat request body received, in order
        self.stopping = threading.Event()  # set on close: slow backends may stop waiting
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the CLI owns the terminal
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def _route(self) -> str:
                return self.path.split("?", 1)[0].rstrip("/")  # a query (Azure's ?api-version=) routes nowhere

            def do_GET(self) -> None:
                if self._route() in ("/v1/models", "/models"):
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": server.model, "object": "model", "owned_by": server.owned_by}],
                        },
                    )
                else:
                    self._send(404, error_body(f"no route {self.path}", "not_found_error"))

            def do_POST(self) -> None:
                if self._route() not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, error_body(f"no route {self.path}", "not_found_error"))
                    return
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(n) or b"{}")
                except (ValueError, json.JSONDecodeError):
                    self._send(400, error_body("request body is not JSON"))
                    return
                server.requests.append(body)
                try:
                    status, out = server.backend(body)
                except Exception as e:  # noqa: BLE001 - a backend failure is an HTTP 500, not a crash
                    status, out = 500, error_body(f"{type(e).__name__}: {e}", "server_error")
                self._send(status, out)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ChatServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="agentsched-chat", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def require_llama_cpp() -> None:
    """One-line error when the local-llm extra is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise AgentschedError(
            "a local GGUF model needs the local-llm extra: pip install 'agentsched[local-llm]' (llama-cpp-python)"
        )


def gguf_backend(
    model_path: str | Path, *, n_ctx: int = 8192, n_gpu_layers: int = 0, seed: int = 0, chat_format: str | None = None
) -> ChatBackend:
    """A ChatServer backend that runs a GGUF model in-process with llama-cpp-python."""
    require_llama_cpp()
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise AgentschedError(f"GGUF model not found: {path}")
    import llama_cpp

    kwargs: dict[str, Any] = {
        "model_path": str(path),
        "n_ctx": n_ctx,
        "n_gpu_layers": n_gpu_layers,
        "seed": seed,
        "verbose": False,
    }
    if chat_format:
        kwargs["chat_format"] = chat_format
    try:
        llm = llama_cpp.Llama(**kwargs)
    except Exception as e:  # noqa: BLE001 - report a bad model file in one line
        raise AgentschedError(f"cannot load GGUF model {path}: {e}") from None
    lock = threading.Lock()  # one llama context: serialise requests
    grammars = GrammarCache(llama_cpp)

    def backend(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        args: dict[str, Any] = {
            "messages": body.get("messages", []),
            "temperature": float(body.get("temperature", 0.2)),
        }
        if body.get("max_tokens"):
            args["max_tokens"] = int(body["max_tokens"])
        try:
            args.update(llama_structured_output(body, grammars))
        except Exception as e:  # noqa: BLE001 - a schema llama.cpp cannot compile: the client moves down its chain
            return 500, error_body(f"response_format schema cannot be compiled to a grammar: {e}", "server_error")
        with lock:
            out = llm.create_chat_completion(**args)
        return 200, dict(out)  # already an OpenAI chat.completion body

    return backend


class GrammarCache:
    """llama.cpp grammars compiled from JSON schemas (``LlamaGrammar.from_json_schema``), one per schema:
    every round of a run asks with the same schema, and compiling it costs time."""

    def __init__(self, llama_cpp: Any) -> None:
        self._llama_cpp = llama_cpp  # the module (imported lazily by the caller)
        self._by_schema: dict[str, Any] = {}

    def __call__(self, schema: dict[str, Any]) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._by_schema:
            self._by_schema[key] = self._llama_cpp.LlamaGrammar.from_json_schema(key, verbose=False)
        return self._by_schema[key]


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a chat request asks the answer to follow, wherever the client put it
    (``response_format`` json_schema, ``json_object`` + ``schema``, vLLM's ``guided_json``, Ollama's
    ``format``), or None."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
        else:
            schema = fmt.get("schema") if fmt.get("type") == "json_object" else None
        if isinstance(schema, dict):
            return schema
    for key in ("guided_json", "format"):
        if isinstance(body.get(key), dict):
            return body[key]
    return None


def llama_structured_output(body: dict[str, Any], grammars: GrammarCache) -> dict[str, Any]:
    """``create_chat_completion`` arguments that constrain decoding as the request asks: a grammar
    compiled from its JSON schema (passed alone: llama-cpp-python's chat handlers replace a grammar by
    the one of a ``json_object`` response_format), JSON without a schema, or nothing (plain)."""
    schema = request_schema(body)
    if schema is not None:
        return {"grammar": grammars(schema)}
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return {"response_format": {"type": "json_object"}}
    return {}


def serve_gguf(
    model_path: str | Path,
    *,
    port: int = 0,
    n_ctx: int = 8192,
    n_gpu_layers: int = 0,
    seed: int = 0,
    chat_format: str | None = None,
) -> ChatServer:
    """Load a GGUF model and serve it on 127.0.0.1 (started; close() when done)."""
    backend = gguf_backend(model_path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, seed=seed, chat_format=chat_format)
    return ChatServer(backend, model=Path(model_path).stem, port=port).start()
