"""The API's contract through a real server: pin/unpin, token, status codes, loopback by default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.service.conftest import ROOT

WORKFLOWS = ROOT / "tests" / "service" / "workflows"
POLL_S = 0.02
POLL_LIMIT = 3000  # bounded wait loops (polls), not a timing check


def _wait_in_flight(client: httpx.Client, n: int) -> None:
    for _ in range(POLL_LIMIT):
        if client.get("/healthz").json()["in_flight"] >= n:
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never {n} invocation(s) in flight")


def test_pin_runs_the_mapping_outside_learning_and_unpin_resumes(start_server, tmp_path):
    server = start_server(["S1", "--store", str(tmp_path / "p.db"), "--testbed", "sim", "--realtime"])
    pin = {"A": "cpu", "B": "gpu_now", "C": "cpu", "D": "cpu"}
    with server.client() as c:
        assert c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()["kind"] == "round"
        r = c.put("/v1/workflows/S1/mapping", json={"mapping": pin})
        assert r.status_code == 200 and r.json()["pinned"] and r.json()["current_mapping"] == pin
        before = c.get("/v1/workflows").json()[0]
        for _ in range(3):
            d = c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()
            assert d["mapping"] == pin and d["kind"] == "pinned"
        after = c.get("/v1/workflows").json()[0]
        assert after["invocations"] == before["invocations"] + 3 and after["replayed"] == before["replayed"]
        kinds = [h["kind"] for h in c.get("/v1/workflows/S1/history").json()]
        assert kinds.count("pinned") == 3
        assert c.put("/v1/workflows/S1/mapping", json={"mapping": {"A": "cpu"}}).status_code == 422
        assert c.put("/v1/workflows/S1/mapping", json={"mapping": {**pin, "A": "warp"}}).status_code == 422
        r = c.delete("/v1/workflows/S1/mapping")
        assert r.status_code == 200 and not r.json()["pinned"]
        assert c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()["kind"] in ("round", "probe")
        assert c.get("/v1/workflows/S9/mapping").status_code == 404
    assert server.stop() == 0


def test_token_is_required_on_the_api_not_on_healthz(start_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    server = start_server(
        ["S1", "--store", str(tmp_path / "t.db"), "--testbed", "sim", "--realtime", "--token-file", str(token_file)]
    )
    with server.client() as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/workflows").status_code == 401
        assert c.get("/metrics").status_code == 401
        r = c.post("/v1/workflows/S1/invocations", json={"inputs": {}}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        ok = {"Authorization": "Bearer s3cret-token"}
        assert c.get("/v1/workflows", headers=ok).status_code == 200
        assert c.post("/v1/workflows/S1/invocations", json={"inputs": {}}, headers=ok).json()["status"] == "ok"
    assert server.stop() == 0
    assert not any("s3cret" in line for line in server.lines)  # never logged


def test_status_codes_404_422_and_503_over_the_limit(start_server, tmp_path):
    server = start_server(["sleepy.yaml", "--store", str(tmp_path / "c.db"), "--max-concurrency", "1"], cwd=WORKFLOWS)
    with server.client() as c:
        assert c.post("/v1/workflows/nope/invocations", json={"inputs": {}}).status_code == 404
        r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {}})
        assert r.status_code == 422 and "seconds" in r.json()["detail"]
        assert r.json()["detail"].endswith('(send them in the request body: {"inputs": {"NAME": VALUE}})')
        r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0, "extra": 1}})
        assert r.status_code == 422 and "extra" in r.json()["detail"]
        r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": 3})
        assert r.status_code == 422 and r.json()["detail"] == "body.inputs: Input should be a valid dictionary"
        r = c.post("/v1/workflows/sleepy/invocations", json={"input": {"seconds": 0}})  # misspelt: not run with none
        assert r.status_code == 422 and r.json()["detail"] == "body.input: Extra inputs are not permitted"
        r = c.post(
            "/v1/workflows/sleepy/invocations", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert r.status_code == 422 and r.json()["detail"].startswith("the request body is not valid JSON: Expecting")
        # JSON sent under another content type (curl -d alone sends a form's), or no body at all
        r = c.post(
            "/v1/workflows/sleepy/invocations",
            content=b'{"inputs": {}}',
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 415 and r.json()["detail"] == (
            "the request body must be JSON (content-type: application/json), got content-type "
            "'application/x-www-form-urlencoded'"
        )
        r = c.post("/v1/workflows/sleepy/invocations", content=b'{"inputs": {}}')  # no content-type at all
        assert r.status_code == 415 and r.json()["detail"].endswith("got no content-type")
        r = c.post("/v1/workflows/sleepy/invocations")
        assert r.status_code == 422 and r.json()["detail"].startswith("the request body is missing: send a JSON")
        # bodies JSON decoding raises on (before: a bare 400 "There was an error parsing the body")
        for raw, why in (
            (b'{"inputs": {"x": "\xff\xfe"}}', "is not valid JSON: it is not UTF-8"),
            (b"[" * 100_000 + b"]" * 100_000, "cannot be read: it is nested too deep"),
            (b'{"inputs": {"x": ' + b"1" * 5000 + b"}}", "cannot be read: a number in it has more than 4300 digits"),
        ):
            r = c.post("/v1/workflows/sleepy/invocations", content=raw, headers={"content-type": "application/json"})
            assert (r.status_code, r.json()["detail"]) == (422, f"the request body {why}")
        assert c.get("/v1/workflows/nope").status_code == 404  # other HTTP errors as before
        slow: list[httpx.Response] = []
        t = threading.Thread(
            target=lambda: slow.append(
                server.client().post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 3}})
            )
        )
        t.start()
        _wait_in_flight(c, 1)
        r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0}})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        t.join(120)
        assert slow[0].status_code == 200 and slow[0].json()["outputs"] == {"wait": 3.0}
        assert "/v1/workflows/{name}/invocations" in c.get("/openapi.json").json()["paths"]
    assert server.stop() == 0


def test_a_non_loopback_host_needs_a_token_or_insecure(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsched",
            "serve",
            "S1",
            "--store",
            str(tmp_path / "x.db"),
            "--testbed",
            "sim",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("error: --host 0.0.0.0 is not a loopback address") and r.stderr.count("\n") == 1
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    "port, message",
    [
        ("70000", "error: --port must be 0-65535, got 70000"),
        ("-1", "error: --port must be 0-65535, got -1"),
        ("TAKEN", "error: cannot listen on 127.0.0.1:"),
    ],
)
def test_a_port_it_cannot_listen_on_is_one_line_before_anything_opens(tmp_path, port, message):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1]) if port == "TAKEN" else port
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentsched",
                "serve",
                "S1",
                "--store",
                str(tmp_path / "x.db"),
                "--testbed",
                "sim",
                "--port",
                port,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 2 and r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "x.db").exists()  # refused before the store was opened


def test_a_task_over_its_timeout_ends_its_invocation_as_error(start_server, tmp_path):
    server = start_server(["sleepy.yaml", "--store", str(tmp_path / "o.db"), "--task-timeout-s", "1"], cwd=WORKFLOWS)
    with server.client() as c:
        d = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 3}}).json()
        assert d["status"] == "error" and "timeout" in d["message"].lower()
        d = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0}}).json()
        assert d["status"] == "ok" and d["outputs"] == {"wait": 0.0}  # the service carries on
    assert server.stop() == 0


def test_history_limit_is_the_newest_n_and_is_validated(start_server, tmp_path):
    server = start_server(["S1", "--store", str(tmp_path / "h.db"), "--testbed", "sim", "--realtime"])
    with server.client() as c:
        ids = [c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()["invocation_id"] for _ in range(5)]
        assert [h["invocation_id"] for h in c.get("/v1/workflows/S1/history", params={"limit": 2}).json()] == ids[-2:]
        assert [h["invocation_id"] for h in c.get("/v1/workflows/S1/history").json()] == ids  # default 100
        for bad in (0, -1, 10_001, "x"):
            r = c.get("/v1/workflows/S1/history", params={"limit": bad})
            assert r.status_code == 422 and isinstance(r.json()["detail"], str), bad  # one line, as every error
            assert r.json()["detail"].startswith("query.limit: ") and "\n" not in r.json()["detail"]
        assert c.get("/v1/workflows/S9/history", params={"limit": 1}).status_code == 404
    assert server.stop() == 0
