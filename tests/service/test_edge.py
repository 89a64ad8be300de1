"""The service's edge (issue 48): the token before the body, the body's cap, parsing off the event
loop, duplicate keys, slow clients, answers that always encode and have a bound, the access log."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import textwrap

import pytest
from fastapi.testclient import TestClient

from agentsched.service.app import create_app
from agentsched.service.config import ServiceConfig
from agentsched.testbeds.spec import TestbedSpec

RECV_BOUND_S = 60  # bounds a read that must end (an answer, or the server closing); not a timing check
TOKEN = "edge-token"
OK = {"Authorization": f"Bearer {TOKEN}"}

TOOLS = textwrap.dedent("""
    import agentsched


    class Odd(agentsched.Tool):
        name, has_gpu, tags, workload = "odd", False, ("compute-light",), "returns what it is asked for"
        input_names = ("what",)

        def run(self, inputs):
            what = inputs["what"]
            if what == "cyclic":
                out = []
                out.append(out)
                return out
            if what == "deep":
                out = []
                for _ in range(5000):
                    out = [out]
                return out
            if what == "bigint":
                return 10 ** 5000
            if what == "badrepr":
                class Bad:
                    def __repr__(self):
                        raise RuntimeError("no repr")
                return Bad()
            if what == "big":
                return "x" * 3_000_000
            if what == "raise":
                raise ValueError("boom " + "y" * 100_000)
            return what  # echoed (a lone surrogate among them)
""")


@pytest.fixture
def odd(tmp_path, monkeypatch):
    (tmp_path / "odd_tools.py").write_text(TOOLS)
    (tmp_path / "odd.yaml").write_text('name: odd\ntasks:\n  A: {tool: "odd_tools:Odd"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _client(odd, **kw) -> TestClient:
    config = ServiceConfig(
        workflows=(str(odd / "odd.yaml"),), store=odd / "s.db", testbed=TestbedSpec(kind="local"), **kw
    )
    return TestClient(create_app(config, token=TOKEN))


@pytest.mark.parametrize(
    "what, where",
    [
        ("\ud800", "a lone surrogate (not UTF-8) replaced by U+FFFD"),
        ("cyclic", "cyclic: it contains itself"),
        ("deep", "nested deeper than 64"),
        ("bigint", "an integer of about 5,000 digits (more than 4,300)"),
        ("badrepr", "a Bad whose repr raised RuntimeError"),
    ],
)
def test_an_output_json_cannot_hold_is_marked_and_the_invocation_answers_with_its_id(odd, what, where):
    with _client(odd) as c:
        body = json.dumps({"inputs": {"what": what}}).encode()  # (ASCII: a lone surrogate sent escaped)
        r = c.post("/v1/workflows/odd/invocations", content=body, headers={**OK, "content-type": "application/json"})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["status"] == "ok" and isinstance(d["invocation_id"], int)
        assert any(where in line for line in d["cut"]), d["cut"]
        [row] = c.get("/v1/workflows/odd/history", headers=OK).json()
        assert row["invocation_id"] == d["invocation_id"]  # recorded once, and the caller has its id


def test_an_output_and_an_error_text_over_their_caps_are_cut_and_marked(odd):
    with _client(odd, max_output_mb=1.0, max_message_chars=1000) as c:
        d = c.post("/v1/workflows/odd/invocations", json={"inputs": {"what": "big"}}, headers=OK).json()
        text = d["outputs"]["A"]
        assert d["status"] == "ok" and len(text) < 1_100_000 and text.startswith("xxx")
        assert text.endswith("[cut: 3,000,000 characters, over the cap of 1,048,576 bytes]")
        assert d["cut"] == ["outputs.A: a text of 3,000,000 characters cut"]
        d = c.post("/v1/workflows/odd/invocations", json={"inputs": {"what": "raise"}}, headers=OK).json()
        assert d["status"] == "error" and "ValueError: boom yyy" in d["message"], d["message"][:200]
        assert len(d["message"]) < 1100 and d["message"].endswith(" characters, over the cap of 1,000 characters]")
        assert "message: cut at 1,000 characters" in d["cut"]
        rows = c.get("/v1/workflows/odd/history", headers=OK).json()
        assert len(rows[-1]["message"]) < 1100 and "[cut: " in rows[-1]["message"]  # every history read bounded


def test_a_body_naming_a_key_twice_is_refused(odd):
    with _client(odd) as c:
        r = c.post(
            "/v1/workflows/odd/invocations",
            content=b'{"inputs": {"what": "a", "what": "b"}}',
            headers={**OK, "content-type": "application/json"},
        )
        assert r.status_code == 422
        assert r.json()["detail"] == "the request body names the key 'what' twice in one object (each key once)"
        assert c.get("/v1/workflows/odd/history", headers=OK).json() == []  # nothing ran


def test_the_body_is_parsed_off_the_event_loop(odd, monkeypatch):
    import agentsched.service.deps as deps

    on_loop: list[bool] = []
    real = deps.parse

    def spy(*args):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:  # no loop in this thread: a worker's
            on_loop.append(False)
        return real(*args)

    monkeypatch.setattr(deps, "parse", spy)
    with _client(odd) as c:
        assert c.post("/v1/workflows/odd/invocations", json={"inputs": {"what": "a"}}, headers=OK).status_code == 200
    assert on_loop == [False]


def test_invalid_json_without_a_token_is_401(odd):
    with _client(odd) as c:
        r = c.post("/v1/workflows/odd/invocations", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_every_endpoint_declares_its_response_schema(odd):
    with _client(odd) as c:
        doc = c.get("/openapi.json").json()
    missing = [
        f"{method.upper()} {path}"
        for path, methods in doc["paths"].items()
        for method, op in methods.items()
        if not any(body.get("schema") for body in op["responses"].get("200", {}).get("content", {}).values())
    ]
    assert missing == []
    invoke = doc["paths"]["/v1/workflows/{name}/invocations"]["post"]
    assert invoke["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/InvocationResponse"
    }
    assert invoke["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/InvocationRequest")
    mapping = doc["components"]["schemas"]["MappingRequest"]["properties"]["mapping"]
    assert mapping["additionalProperties"] == {"$ref": "#/components/schemas/Mode"}  # typed by Mode
    assert set(doc["components"]["schemas"]["Mode"]["enum"]) == {"cpu", "gpu_now", "gpu_queue"}


def _raw(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send a request head (and the start of a body) on a socket; what the server answers."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=RECV_BOUND_S) as s:
        s.sendall(head + body)
        out = b""
        while b"\r\n\r\n" not in out:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def _head(length: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /v1/workflows/S1/invocations HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n{auth}"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_the_token_and_the_cap_are_checked_before_any_body_byte_is_read(start_server, tmp_path):
    """Before, the server waited for (and parsed) the whole 50 MB body of a caller with no token."""
    (tmp_path / "token").write_text(TOKEN)
    server = start_server(
        [
            "S1",
            "--store",
            str(tmp_path / "t.db"),
            "--testbed",
            "sim",
            "--token-file",
            str(tmp_path / "token"),
            "--max-body-mb",
            "1",
        ]
    )
    answer = _raw(server.url, _head(50_000_000), b'{"inputs": ')  # no token, and the body never sent
    assert answer.startswith(b"HTTP/1.1 401 ")
    answer = _raw(server.url, _head(50_000_000, TOKEN), b'{"inputs": ')  # a token, and a body over the cap
    assert answer.startswith(b"HTTP/1.1 413 ")
    with server.client() as c:

        def chunks():  # no Content-Length: read up to the cap, then refused
            for _ in range(40):
                yield b" " * 65536

        r = c.post("/v1/workflows/S1/invocations", content=chunks(), headers={**OK, "content-type": "application/json"})
        assert r.status_code == 413 and "over the cap of 1,048,576 bytes" in r.json()["detail"]
        assert c.post("/v1/workflows/S1/invocations", json={"inputs": {}}, headers=OK).json()["status"] == "ok"
    assert server.stop() == 0


def test_slow_clients_are_closed_and_connections_capped(start_server, tmp_path):
    """Before, sockets that never finished their headers stayed open for as long as their client
    wished (slowloris): enough of them held every descriptor and /healthz stopped answering."""
    server = start_server(
        [
            "S1",
            "--store",
            str(tmp_path / "s.db"),
            "--testbed",
            "sim",
            "--header-timeout-s",
            "1",
            "--max-connections",
            "8",
        ]
    )
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    slow = []
    for _ in range(12):
        s = socket.create_connection((host, int(port)), timeout=RECV_BOUND_S)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # a head never finished
        slow.append(s)
    answers = []
    for s in slow:
        with s:
            answers.append(s.recv(4096))  # the server closes each: b"" (late head) or a 503 (over the cap)
    assert all(a == b"" or a.startswith(b"HTTP/1.1 503 ") for a in answers), answers
    assert any(a == b"" for a in answers)  # closed by the head deadline, not only refused
    with server.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
    assert server.stop() == 0


def test_serve_logs_each_request_the_drain_and_the_stop(start_server, tmp_path):
    server = start_server(["S1", "--store", str(tmp_path / "l.db"), "--testbed", "sim"])
    with server.client() as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/workflows/nope/history").status_code == 404
    assert server.stop(signal.SIGTERM) == 0
    text = "".join(server.lines)
    assert '"GET /healthz" 200 ' in text and '"GET /v1/workflows/nope/history" 404 ' in text
    assert "agentsched serve: draining: 0 invocation(s) in flight" in text
    assert "agentsched serve: drained: every accepted invocation answered; stopping" in text
    assert text.rstrip().endswith("agentsched serve: stopped")


def test_failed_accepts_are_one_line_now_and_then_not_a_traceback_each(caplog):
    """Before, each failed accept() (descriptors exhausted) logged asyncio's traceback: 248 MB in 35 s."""
    from agentsched.service.edge import ACCEPT_LOG_EVERY, AcceptErrors

    handler = AcceptErrors()
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level("ERROR"):
            for _ in range(ACCEPT_LOG_EVERY + 1):
                handler(
                    loop,
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(24, "Too many open files"),
                    },
                )
    finally:
        loop.close()
    lines = [r for r in caplog.records if "accept() failed" in r.getMessage()]
    assert [r.getMessage() for r in lines] == [
        f"accept() failed (Too many open files), {n} time(s) so far: new connections wait (too many open files? "
        "lower --max-connections or raise the descriptor limit, ulimit -n)"
        for n in (1, ACCEPT_LOG_EVERY + 1)
    ]
    assert all(r.exc_info is None for r in caplog.records)
