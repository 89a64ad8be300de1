"""A small stream fired open-loop at a real ``agentsched serve --testbed sim --realtime`` process."""

from __future__ import annotations

import json

from agentsched.experiments.loadgen import run_against, summarize_shots
from agentsched.experiments.traffic import seeded_arrivals
from tests.support import json_doc

MIX = ["S1", "S7"]
TIME_SCALE = 100.0  # simulated ms per wall ms: a 5 s simulated stream in 50 ms of wall time


def _serve(start_server, tmp_path):
    return start_server(
        [
            *MIX,
            "--store",
            str(tmp_path / "l.db"),
            "--testbed",
            "sim",
            "--realtime",
            "--time-scale",
            str(TIME_SCALE),
            "--vram-budget-mb",
            "8192",
            "--max-concurrency",
            "1000",
        ]
    )


def test_a_served_stream_records_every_invocation(start_server, tmp_path):
    server = _serve(start_server, tmp_path)
    arrivals = seeded_arrivals("poisson", 4.0, 5.0, MIX, seed=1)
    shots = run_against(server.url, arrivals, MIX, time_scale=TIME_SCALE)
    assert len(shots) == len(arrivals) >= 5
    assert all(s.http_status == 200 and s.status in ("ok", "oom") for s in shots), [s.message for s in shots]
    assert all(s.e2e_ms > 0 and s.latency_ms >= s.e2e_ms * 0.5 for s in shots if s.status == "ok")
    with server.client() as client:
        recorded = {
            h["invocation_id"]
            for wf in MIX
            for h in client.get(f"/v1/workflows/{wf}/history", params={"limit": 1000}).json()
        }
    assert {s.invocation_id for s in shots} <= recorded and None not in recorded
    assert summarize_shots(shots)["sent"] == len(arrivals)
    assert server.stop() == 0


def test_the_loadgen_command(start_server, tmp_path, cli):
    server = _serve(start_server, tmp_path)
    code, out, err = cli(
        "loadgen",
        server.url,
        *MIX,
        "--rates",
        "3",
        "--duration-s",
        "4",
        "--time-scale",
        str(TIME_SCALE),
        "--seed",
        "2",
        "--json",
    )
    assert code == 0, err
    json_doc.check("`agentsched loadgen ", json.loads(out))  # the fields docs/json.md lists, no more, no fewer
    row = json.loads(out)["rows"][0]
    assert row["sent"] == len(seeded_arrivals("poisson", 3.0, 4.0, MIX, seed=2))
    assert row["ok"] + row["oom"] == row["sent"] and row["p50_ms"] is not None
    code, out, err = cli("loadgen", server.url, "S1", "S99", "--rates", "1")
    assert code == 2 and "does not serve S99" in err and "Traceback" not in err
    secret_url = server.url.replace("://", "://alice:s3cret@", 1)  # credentials in the URL: never printed
    code, out, err = cli(
        "loadgen", secret_url, "S1", "--rates", "2", "--duration-s", "4", "--time-scale", str(TIME_SCALE), "--json"
    )
    assert code == 0 and json.loads(out)["rows"][0]["sent"] > 0, err
    assert "s3cret" not in out + err and json.loads(out)["url"].startswith("http://***@")
    # the service's clock is adopted from /healthz: none given, or one it contradicts (said in a note)
    code, out, err = cli("loadgen", server.url, "S1", "--rates", "4", "--duration-s", "2", "--seed", "3", "--json")
    assert code == 0 and json.loads(out)["time_scale"] == TIME_SCALE and err == "", err
    assert json.loads(out)["rows"][0]["sent"] == len(seeded_arrivals("poisson", 4.0, 2.0, ["S1"], seed=3))
    code, out, err = cli(
        "loadgen", server.url, "S1", "--rates", "4", "--duration-s", "2", "--seed", "3", "--time-scale", "1", "--json"
    )
    assert code == 0 and json.loads(out)["time_scale"] == TIME_SCALE, err
    assert err.strip() == (
        "note: the service runs at --time-scale 100 (simulated ms per wall ms), not 1: the stream uses 100"
    )
    # a stream with no arrival would measure nothing: refused before anything is sent
    code, out, err = cli(
        "loadgen", server.url, "S1", "--rates", "20,0.01", "--duration-s", "1", "--time-scale", str(TIME_SCALE)
    )
    assert code == 2 and out == ""
    assert err.strip() == "error: the stream has no arrival at rate(s) 0.01 in 1 s: raise --duration-s or the rate"
    assert server.stop() == 0


def test_the_loadgen_command_against_a_local_service_of_user_tools(start_server, tmp_path, cli):
    """Real tools on the local testbed take inputs: ``--input`` sends them with every arrival."""
    from tests.service.conftest import EXAMPLE_WORKFLOWS

    server = start_server(
        [str(EXAMPLE_WORKFLOWS), "--store", str(tmp_path / "u.db"), "--testbed", "local", "--cpu-slots", "2"],
        cwd=EXAMPLE_WORKFLOWS,
    )
    code, out, err = cli(
        "loadgen",
        server.url,
        "shout",
        "wordstats",
        "--rates",
        "20",
        "--duration-s",
        "1",
        "--seed",
        "1",
        "--input",
        "text=loud words",
        "--json",
    )
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["sent"] == len(seeded_arrivals("poisson", 20.0, 1.0, ["shout", "wordstats"], seed=1)) > 5
    assert row["ok"] == row["sent"]  # every invocation had its input (without it: 422, counted as other)
    with server.client() as client:
        history = client.get("/v1/workflows/shout/history").json()
        assert history and all(h["status"] == "ok" for h in history)
    assert row["first_failure"] is None
    code, out, err = cli("loadgen", server.url, "shout", "--rates", "20", "--duration-s", "1", "--seed", "1")
    assert code == 1, err  # without its input every arrival is refused: the table says why, then the exit status
    assert "| 0 | " in out and "not ok; the first: shout: http-422: invocation is missing input(s)" in out
    assert len(err.splitlines()) == 1 and err.startswith(
        "error: no arrival answered ok or oom at rate(s) 20; the first failure: shout: http-422: invocation is missing"
    )
    code, out, err = cli("loadgen", server.url, "shout", "--rates", "20,10", "--duration-s", "1", "--json")
    assert code == 1 and [r["ok"] for r in json.loads(out)["rows"]] == [0, 0]  # the JSON first, whole
    assert "at rate(s) 20, 10; " in err and "Traceback" not in err
    code, _, err = cli("loadgen", server.url, "shout", "--rates", "1", "--input", "no-equals-sign")
    assert code == 2 and "is not NAME=VALUE" in err and "Traceback" not in err
    assert server.stop() == 0
