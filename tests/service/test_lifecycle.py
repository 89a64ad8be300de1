"""SIGTERM drains and exits 0 with every accepted invocation recorded; SIGKILL then restart resumes."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from agentsched.store import Store
from tests.service.conftest import ROOT
from tests.service.test_api import _wait_in_flight

WORKFLOWS = ROOT / "tests" / "service" / "workflows"


def _sleepers(server, n: int, seconds: float) -> tuple[list[threading.Thread], list[httpx.Response]]:
    """``n`` clients each posting one ``sleepy`` invocation of ``seconds``; their answers, as they come."""
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def call() -> None:
        with server.client() as c:
            r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": seconds}})
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, answers


def test_sigterm_drains_in_flight_and_refuses_new(start_server, tmp_path):
    db = tmp_path / "d.db"
    server = start_server(["sleepy.yaml", "--store", str(db), "--drain-s", "60", "--round-size", "4"], cwd=WORKFLOWS)
    threads, answers = _sleepers(server, 4, 2)
    with server.client() as c:
        _wait_in_flight(c, 4)
        server.proc.send_signal(signal.SIGTERM)
        r = None
        for _ in range(500):  # the drain starts on a thread: bounded polling until it shows
            r = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0}})
            if r.status_code == 503:
                break
            answers.append(r)  # accepted before the drain began: answered, and recorded too
        assert r is not None and r.status_code == 503 and "draining" in r.json()["detail"]
        assert c.get("/healthz").json()["status"] == "draining"
    for t in threads:
        t.join(120)
    assert server.proc.wait(120) == 0
    assert len(answers) >= 4 and {r.status_code for r in answers} == {200}
    assert sum(r.json()["outputs"] == {"wait": 2.0} for r in answers) == 4
    st = Store(db, read_only=True)
    try:
        (learner,) = st.learners("sleepy")
        recorded = {e.id for e in st.executions(learner.id)}
    finally:
        st.close()
    assert {r.json()["invocation_id"] for r in answers} == recorded  # every accepted one, nothing else


def test_sigkill_then_restart_resumes_the_learner(start_server, tmp_path):
    db = tmp_path / "k.db"
    args = ["S1", "--store", str(db), "--testbed", "sim", "--realtime", "--round-size", "3"]
    server = start_server(args)
    with server.client() as c:
        ids = [c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()["invocation_id"] for _ in range(9)]
        before = c.get("/v1/workflows").json()[0]
    server.proc.send_signal(signal.SIGKILL)
    assert server.proc.wait(60) == -signal.SIGKILL
    again = start_server(args)
    with again.client() as c:
        after = c.get("/v1/workflows").json()[0]
        # the whole sequence replayed: same learner, same count, the same best round as before the kill
        assert after["learner"] == before["learner"] and after["replayed"] == before["invocations"] == 9
        assert after["best_mapping"] == before["best_mapping"] and after["best_e2e_ms"] == pytest.approx(
            before["best_e2e_ms"]
        )
        d = c.post("/v1/workflows/S1/invocations", json={"inputs": {}}).json()
        assert d["invocation_id"] > max(ids)
        history = c.get("/v1/workflows/S1/history").json()
        assert [h["invocation_id"] for h in history] == [*ids, d["invocation_id"]]
        assert [h["seq"] for h in history] == list(range(10))  # learning continued the same sequence
    assert again.stop() == 0


def _log_once_it_says(server, text: str) -> str:
    """The server's stderr, once it holds ``text`` (its reader thread may still be reading)."""
    deadline = time.monotonic() + 30
    while text not in "".join(server.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    log = "".join(server.lines)
    assert text in log, log
    return log


def test_invocations_still_running_after_drain_s_are_recorded_as_cut(start_server, tmp_path):
    db = tmp_path / "cut.db"
    server = start_server(["sleepy.yaml", "--store", str(db), "--drain-s", "1", "--round-size", "4"], cwd=WORKFLOWS)
    with server.client() as c:
        done = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0}}).json()
    threads, answers = _sleepers(server, 2, 3600)  # far longer than the test's waits: only the cut answers
    with server.client() as c:
        _wait_in_flight(c, 2)
    assert server.stop() == 0  # exits without waiting for the abandoned tools
    for t in threads:
        t.join(120)
    assert [r.status_code for r in answers] == [200, 200]
    cut = [r.json() for r in answers]
    assert all(d["status"] == "error" and d["kind"] == "cut" for d in cut)
    assert all(d["message"] == "cut by shutdown after drain-s (1 s)" for d in cut)
    log = _log_once_it_says(server, "were cut (recorded as error)")
    assert "not recorded" not in log  # before, a runtime's warning said so of the invocations the cut recorded
    st = Store(db, read_only=True)
    try:
        (learner,) = st.learners("sleepy")
        rows = {e.id: e for e in st.executions(learner.id)}
    finally:
        st.close()
    # every accepted invocation recorded: the one answered before, and both cut ones (outside the sequence)
    assert set(rows) == {done["invocation_id"], *(d["invocation_id"] for d in cut)}
    assert rows[done["invocation_id"]].status == "ok"
    assert all(rows[d["invocation_id"]].seq is None and rows[d["invocation_id"]].status == "error" for d in cut)
    again = start_server(["sleepy.yaml", "--store", str(db), "--round-size", "4"], cwd=WORKFLOWS)
    with again.client() as c:  # the cut records stay outside the sequence: the learner replays and goes on
        assert c.get("/v1/workflows").json()[0]["replayed"] == 1
        d = c.post("/v1/workflows/sleepy/invocations", json={"inputs": {"seconds": 0}}).json()
        assert d["status"] == "ok" and d["invocation_id"] > max(rows)
        kinds = [h["kind"] for h in c.get("/v1/workflows/sleepy/history").json()]
        assert kinds == ["round", "cut", "cut", "round"]
    assert again.stop() == 0


@pytest.mark.parametrize("placement, signals", [("policy", 2), ("live", 2), ("live", 3)])
def test_a_second_signal_cuts_what_still_runs_at_once_each_answered_once(start_server, tmp_path, placement, signals):
    db = tmp_path / f"second-{placement}-{signals}.db"
    server = start_server(
        ["sleepy.yaml", "--store", str(db), "--drain-s", "3600", "--round-size", "4", "--placement", placement],
        cwd=WORKFLOWS,
    )
    threads, answers = _sleepers(server, 2, 3600)  # only a cut can answer them
    with server.client() as c:
        _wait_in_flight(c, 2)
    server.proc.send_signal(signal.SIGTERM)  # a drain of an hour...
    with server.client() as c:
        for _ in range(500):  # (bounded polling until the drain shows)
            if c.get("/healthz").json()["status"] == "draining":
                break
    if signals == 3:  # Ctrl-C pressed fast: the third comes while the cut answers, and waits for it
        server.proc.send_signal(signal.SIGTERM)
    assert server.stop() == 0  # ...cut short by the second signal
    for t in threads:
        t.join(120)
    assert [r.status_code for r in answers] == [200, 200]
    assert all(r.json()["kind"] == "cut" and r.json()["message"] == "cut by a second shutdown signal" for r in answers)
    assert not any("Traceback" in line for line in server.lines)
    st = Store(db, read_only=True)
    try:
        (learner,) = st.learners("sleepy")
        kinds = [e.kind for e in st.executions(learner.id)]
    finally:
        st.close()
    assert kinds == ["cut", "cut"]  # each recorded once


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_address_is_printed_as_a_url_a_client_can_use(start_server, tmp_path):
    """Before: http://::1:PORT, which no client takes."""
    server = start_server(
        ["S1", "--store", str(tmp_path / "s.db"), "--testbed", "sim", "--cards", "a5500", "--host", "::1"]
    )
    assert server.url is not None and server.url.startswith("http://[::1]:")
    with server.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
    assert server.stop() == 0
