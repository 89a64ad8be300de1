"""agentsched load: rows per policy and load, report.md with the plot, one-line errors."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

ROW_KEYS = {
    "policy",
    "load",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "throughput_per_s",
    "oom",
    "errors",
    "gpu_util",
    "slowdown_by_workflow",
}


def test_load_rows_report_and_plot(cli, tmp_path):
    out = tmp_path / "o"
    code, stdout, err = cli(
        "load",
        "S1",
        "S10",
        "--load",
        "0.3,0.6",
        "--duration-s",
        "10",
        "--seeds",
        "2",
        "--policies",
        "agentsched,dmda,all-gpu+adm",
        "--out",
        str(out),
        "--json",
        "--json-out",
        str(tmp_path / "l.json"),
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert json.loads((tmp_path / "l.json").read_text()) == doc
    assert [(r["policy"], r["load"]) for r in doc["rows"]] == [
        (p, ld) for ld in (0.3, 0.6) for p in ("traffic-aware", "dmda", "all-gpu+adm")
    ]
    for r in doc["rows"]:
        assert ROW_KEYS <= set(r)
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert set(r["slowdown_by_workflow"]) <= {"S1", "S10"}
        assert r["rate_per_s"] == pytest.approx(r["load"] * doc["capacity_per_s"], rel=1e-3)
    assert doc["capacity_per_s"] > 0 and set(doc["saturation_throughput_per_s"]) == {
        "traffic-aware",
        "dmda",
        "all-gpu+adm",
    }
    assert doc["capacity_searched"] is True
    report = (out / "report.md").read_text()
    assert "latency_vs_load.png" in report and "| traffic-aware | 0.3 |" in report
    assert (out / "latency_vs_load.png").stat().st_size > 1000
    assert json.loads((out / "load.json").read_text()) == doc
    # the floor: per load, the arrivals' latencies alone, which no policy's percentile goes below
    assert [f["load"] for f in doc["isolation_floor"]] == [0.3, 0.6]
    for f in doc["isolation_floor"]:
        assert min(doc["isolated_ms"].values()) <= f["p50_ms"] <= f["p99_ms"] <= max(doc["isolated_ms"].values())
        for r in doc["rows"]:
            if r["load"] == f["load"]:  # noise sigma 0.03: a run alone may beat its expected time by a few %
                assert r["p50_ms"] >= 0.9 * f["p50_ms"]
    assert f"load 0.3: p50 {doc['isolation_floor'][0]['p50_ms']:g} ms" in report
    # progress on stderr (stdout is the JSON): the capacity search takes most of a short study
    # (told as each search ends: the searches run side by side, --jobs)
    rates, lines = doc["capacity_by_baseline"], err.splitlines()
    found = [line for line in lines if line.startswith("capacity search: ")]
    assert [line.split(" (")[1] for line in found] == [f"{k}/10 baselines)" for k in range(1, 11)]
    assert any(line.startswith(f"capacity search: dmda+adm sustains {rates['dmda+adm']:g}/s (") for line in found)
    assert f"saturation: traffic-aware sustains {doc['saturation_throughput_per_s']['traffic-aware']:g}/s" in lines


def test_rates_and_trace_with_a_given_capacity_run_no_search(cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("0,S1\n0.5,S10\n1.0,S1\n")
    code, stdout, err = cli(
        "load",
        "S1",
        "S10",
        "--rates",
        "1",
        "--arrival",
        f"trace:{trace}",
        "--seeds",
        "1",
        "--duration-s",
        "5",
        "--policies",
        "dmda",
        "--out",
        str(tmp_path / "o"),
        "--no-plot",
        "--json",
        "--capacity-per-s",
        "4",
    )
    assert code == 0, err
    doc = json.loads(stdout)
    row = doc["rows"][0]
    assert row["invocations"] == 3 and row["oom"] == 0 and row["load"] == 0.25  # 1/s over the given 4/s
    assert doc["capacity_per_s"] == 4 and doc["capacity_searched"] is False
    assert doc["capacity_by_baseline"] == {} and doc["saturation_throughput_per_s"] == {}
    assert "capacity search" not in err and "saturation:" not in err
    report = (tmp_path / "o" / "report.md").read_text()
    assert "capacity = 4 invocations/s, as given (--capacity-per-s: no search ran)" in report
    assert "Throughput at saturation" not in report


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--load", "0.3", "--rates", "1"), "exactly one of --load and --rates"),
        ((), "exactly one of --load and --rates"),
        (("--load", "0.3,x"), "--load: expected comma-separated numbers"),
        (("--load", "-1"), "finite number > 0"),
        (("--load", "0.3", "--policies", "nope"), "unknown load policy 'nope'"),
        (("--load", "0.3", "--arrival", "trace:/nonexistent.csv", "--policies", "dmda"), "cannot read"),
        (("--load", "0.3", "--arrival", "uniform", "--policies", "dmda"), "unknown arrival kind"),
        (("--load", "0.3", "--seeds", "0"), "--seeds must be >= 1"),
        (("--load", "0.3", "--jobs", "0"), "--jobs must be >= 1, got 0"),
        (
            ("--load", "0.3", "--capacity-per-s", "0"),
            "capacity (--capacity-per-s) must be a finite number > 0 per second, got 0.0",
        ),
        (
            ("--load", "0.3", "--capacity-per-s", "nan"),
            "capacity (--capacity-per-s) must be a finite number > 0 per second, got nan",
        ),
        (("--load", "0.9", "--capacity-per-s", "1e9"), "arrivals; at most"),
        # before, these three failed only after the capacity search (minutes), or after the whole study
        (("--load", "0.3", "--noise", "5"), "--noise must be a number in [0, 1], got 5.0"),
        (("--load", "0.3", "--json-out", "/nonexistent/x.json"), "--json-out: folder /nonexistent does not exist"),
        (("--rates", "1e9"), "rate x duration = 5,000,000,000 arrivals; at most 5,000,000"),
        # as serve refuses it (before: the whole study ran, every GPU placement an oom)
        (
            ("--rates", "1", "--capacity-per-s", "1", "--vram-budget-mb", "10"),
            "error: --vram-budget-mb: workflow 'S1': vram_budget_mb 10 is below every tool's VRAM (smallest 316 MB): no "
            "GPU placement can ever fit",
        ),
        (
            ("--rates", "1", "--capacity-per-s", "1", "--vram-budget-mb", "-5"),
            "--vram-budget-mb must be a finite number > 0 (none: omit it), got -5",
        ),
    ],
)
def test_bad_input_is_one_line(cli, tmp_path, args, needle):
    code, _, err = cli("load", "S1", "--duration-s", "5", "--out", str(tmp_path / "o"), *args)
    assert code != 0
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # (before, the folder was made for a trace it then refused)


def test_a_workflow_file_s_world_key_is_the_world_unless_world_is_given(cli, tmp_path):
    """--world's help says so: the file's world: key, else a5500 (load read only --world before)."""
    wf = tmp_path / "maxed.yaml"
    wf.write_text(
        "name: maxed\ncards: a5500\nworld: a5500-max\ndecision_space: binary\n"
        "tasks:\n  A: {tool: llama_1b, repeat: 8}\n  B: {tool: whisper_base, repeat: 4}\nedges: [[A, B]]\n"
    )
    args = (
        "load",
        str(wf),
        "--rates",
        "1",
        "--duration-s",
        "5",
        "--seeds",
        "1",
        "--policies",
        "dmda",
        "--cpu-slots",
        "2",
        "--no-plot",
        "--json",
    )
    code, stdout, err = cli(*args, "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert json.loads(stdout)["machine"]["world"] == "a5500-max"
    code, stdout, err = cli(*args, "--out", str(tmp_path / "b"), "--world", "a5500")
    assert code == 0, err
    assert json.loads(stdout)["machine"]["world"] == "a5500"


def test_loadgen_checks_its_json_out_before_the_stream(cli):
    pytest.importorskip("httpx")
    # no service listens on port 9: before, the stream ran (or failed to reach it) before the file was checked
    code, _, err = cli(
        "loadgen", "http://127.0.0.1:9", "S1", "--rates", "1", "--duration-s", "1", "--json-out", "/nonexistent/x.json"
    )
    assert code == 2 and err.strip() == "error: --json-out: folder /nonexistent does not exist"


class _NotAgentsched(http.server.BaseHTTPRequestHandler):
    """Another kind of server: an OpenAI-style JSON object at /v1/workflows, an HTML page elsewhere."""

    def do_GET(self):  # noqa: N802 - the http.server name
        if self.path.startswith("/json/"):
            body, status, kind = b'{"object": "list", "data": []}', 200, "application/json"
        else:
            body, status, kind = (
                b'<!DOCTYPE HTML>\n<html lang="en">\n<body>Not Found</body>\n</html>\n',
                404,
                "text/html",
            )
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "prefix, needle",
    [
        (
            "/json",
            'is not an agentsched service: GET /v1/workflows answered \'{"object": "list", "data": []}\', '
            "not a list of workflows",
        ),
        ("/html", "/v1/workflows answered HTTP 404: <!DOCTYPE HTML>"),
    ],
)
def test_loadgen_against_another_kind_of_server_is_one_line(cli, prefix, needle):
    """(Before: `internal error: AttributeError`, or a 6-line error quoting the HTML page.)"""
    pytest.importorskip("httpx")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAgentsched)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{prefix}"
        code, _, err = cli("loadgen", url, "S1", "--rates", "1", "--duration-s", "1")
    finally:
        server.shutdown()
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_folder_where_an_output_file_goes_is_refused_before_the_study(cli, tmp_path):
    (tmp_path / "o" / "report.md").mkdir(parents=True)
    code, _, err = cli("load", "S1", "--load", "0.3", "--duration-s", "5", "--out", str(tmp_path / "o"))
    assert code != 0 and err.strip() == (
        f"error: --out: {tmp_path / 'o' / 'report.md'} is a folder, where the "
        "output file report.md goes; remove or rename it"
    )
    assert "capacity search" not in err


def test_a_second_study_on_a_folder_in_use_is_refused(cli, tmp_path):
    """(Two studies on one --out overwrote each other's files, both exiting 0.)"""
    out = tmp_path / "o"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from agentsched.experiments.folder_lock import "
            "hold_folder; hold_folder(sys.argv[1]); print('held', flush=True); time.sleep(120)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = cli("load", "S1", "--load", "0.3", "--duration-s", "5", "--out", str(out))
        assert code != 0 and f"--out {out} is in use by another running bench or load study (pid {holder.pid})" in err
    finally:
        holder.kill()
        holder.wait()
