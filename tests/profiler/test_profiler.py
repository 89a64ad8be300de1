"""The offline profiler: measurements, the card file it writes, and the `profile` command."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from agentsched.model.cards import CardSet, ToolCard, load_card_set, parse_card_set
from agentsched.profiler import host
from agentsched.profiler import profiler as prof

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.tools

S2_TOOLS = ["minilm_l6", "doc_merger", "groupby", "reranker"]


@pytest.fixture(scope="module")
def s2_run() -> prof.ProfileRun:
    return prof.profile(S2_TOOLS, "cpu", size="small", runs=3, warmup=1, busy="ignore")


def test_measurements(s2_run):
    assert [m.tool for m in s2_run.measurements] == S2_TOOLS
    for m in s2_run.measurements:
        assert m.device == "cpu" and m.size == "small" and m.vram_mb is None
        assert len(m.calls_ms) == 3 and m.call_ms > 0 and m.load_ms > 0
        assert min(m.calls_ms) <= m.call_ms <= max(m.calls_ms)


def test_card_file_validates_and_feeds_the_simulator(s2_run, tmp_path):
    from agentsched.model.workflow import Mode
    from agentsched.scenarios import load_scenario
    from agentsched.testbeds.sim import SimTestbed

    cards = prof.build_card_set(s2_run, "here")
    path = tmp_path / "here.json"
    cards.save(path)
    data = json.loads(path.read_text())
    cs = parse_card_set(data, "here")  # the schema check the rest of agentsched uses
    assert set(cs.cards) == set(S2_TOOLS)
    c = cs.cards["groupby"]
    assert c.cpu_ms > 0 and c.gpu_ms is None and c.vram_mb is None
    assert c.workload == "Scatter-add aggregation" and "memory-bound" in c.tags  # from a5500
    m = cs.machine
    assert m["cpu"] and m["cpu_cores"] >= 1 and "torch" in m and "loadavg" in m and "loadavg_end" in m
    assert m["profile"]["runs"] == 3 and len(m["profile"]["measurements"]) == 4
    # the simulated testbed accepts the card set
    wf = load_scenario("S2").with_cards(str(path))
    ex = SimTestbed(noise_sigma=0.0).run(wf, {t: Mode.CPU for t in wf.task_ids})
    assert ex.ok and ex.e2e_ms == pytest.approx(
        cs.cards["minilm_l6"].cpu_ms
        + max(cs.cards["doc_merger"].cpu_ms, cs.cards["groupby"].cpu_ms)
        + cs.cards["reranker"].cpu_ms
    )


def _fake_run(with_cpu: bool) -> prof.ProfileRun:
    ms = [prof.Measurement("clip", "cuda", "small", load_ms=50.0, call_ms=2.0, calls_ms=[2.0], vram_mb=12.5)]
    if with_cpu:
        ms.insert(0, prof.Measurement("clip", "cpu", "small", load_ms=40.0, call_ms=30.0, calls_ms=[30.0]))
    return prof.ProfileRun(
        ms,
        {"cpu": "x", "gpu": "fake"},
        [0.0, 0.0, 0.0],
        {"size": "small", "runs": 1, "warmup": 0, "seed": 0, "devices": ["cpu", "cuda"]},
    )


def test_gpu_fields_come_from_the_gpu_measurement():
    cs = prof.build_card_set(_fake_run(True), "g")
    c = cs.cards["clip"]
    assert (c.cpu_ms, c.gpu_ms, c.load_ms, c.vram_mb) == (30.0, 2.0, 50.0, 12.5)
    assert c.speedup == pytest.approx(15.0)


def test_gpu_only_needs_a_base_card_file():
    with pytest.raises(prof.ProfileError, match="no CPU latency"):
        prof.build_card_set(_fake_run(False), "g")
    base = CardSet(name="old", cards={"clip": ToolCard(name="clip", cpu_ms=99.0, workload="w", tags=("t",))})
    c = prof.build_card_set(_fake_run(False), "g", base=base).cards["clip"]
    assert (c.cpu_ms, c.gpu_ms, c.workload) == (99.0, 2.0, "w")


def test_busy_machine_warns_or_waits(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(host, "others_cpu_pct", lambda interval_s=0.5: 90.0)
    assert host.wait_until_quiet(30.0, "warn", 0.0, said.append) == 90.0
    assert "busy" in said[-1]
    said.clear()
    assert host.wait_until_quiet(30.0, "wait", 0.0, said.append) == 90.0
    assert "waiting" in said[0] and "warning" in said[-1]
    levels = iter([90.0, 10.0])
    monkeypatch.setattr(host, "others_cpu_pct", lambda interval_s=0.5: next(levels))
    monkeypatch.setattr(prof.time, "sleep", lambda s: None)
    said.clear()
    assert host.wait_until_quiet(30.0, "wait", 60.0, said.append) == 10.0
    assert not any("warning" in s for s in said)
    assert host.wait_until_quiet(30.0, "ignore", 0.0, said.append) == 0.0


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(prof.ProfileError, match="unknown tool"):
        prof.profile("clip,nope", "cpu")
    with pytest.raises(prof.ProfileError, match="unknown --device"):
        prof.profile("clip", "tpu")
    with pytest.raises(prof.ProfileError, match="busy"):
        prof.profile("clip", "cpu", busy="sometimes")


def test_gpu_profile_without_cuda_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(prof.ProfileError, match="no CUDA GPU"):
        prof.profile("clip", "gpu")


def test_profile_command_writes_a_valid_card_set(tmp_path):
    from agentsched.cli.profile_cmd import register

    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer from flattening the app
        pass

    out = tmp_path / "cards.json"
    res = CliRunner().invoke(
        app,
        [
            "profile",
            "--tools",
            "groupby,log_analyzer",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--busy",
            "ignore",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "wrote 2 cards" in res.output
    cs = load_card_set(str(out))
    assert cs.name == "cards" and set(cs.cards) == {"groupby", "log_analyzer"}
    # a second run merges into the same file
    res = CliRunner().invoke(
        app, ["profile", "--tools", "pdf_parser", "--runs", "1", "--warmup", "0", "--busy", "ignore", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert set(load_card_set(str(out)).cards) == {"groupby", "log_analyzer", "pdf_parser"}


def test_main_cli_has_profile():
    from agentsched.cli.main import app

    names = {c.name for c in app.registered_commands}
    assert "profile" in names


@pytest.fixture
def no_measuring(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("measured before the arguments were checked")

    monkeypatch.setattr(prof, "run_plan", boom)
    monkeypatch.setattr(prof, "measure", boom)


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="needs /proc")
def test_profile_out_unwritable_is_the_only_stderr_line(cli, no_measuring):
    code, out, err = cli("profile", "--out", "/proc/x.json", "--tools", "groupby", "--runs", "1")
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: --out: cannot write /proc/x.json: No such file or directory"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tools", "nope"], "error: unknown tool 'nope' (known: "),
        (["--device", "tpu"], "error: unknown --device 'tpu' (valid: cpu, gpu, all)"),
        (["--max-busy-pct", "nan"], "error: max busy percent must be a number in [0, 100], got nan"),
        (["--max-wait-s", "inf"], "error: max wait must be a finite number of seconds >= 0, got inf"),
    ],
)
def test_profile_bad_arguments_print_no_progress_bar(cli, no_measuring, tmp_path, args, message):
    code, out, err = cli("profile", "--out", str(tmp_path / "c.json"), *args)
    assert code != 0 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(message)
    assert not (tmp_path / "c.json").exists()


def test_profile_creates_the_out_folder(cli, monkeypatch, tmp_path):
    out = tmp_path / "new" / "c.json"
    code, text, err = cli(
        "profile", "--out", str(out), "--tools", "log_analyzer", "--runs", "1", "--warmup", "0", "--busy", "ignore"
    )
    assert code == 0, err
    assert set(load_card_set(str(out)).cards) == {"log_analyzer"}
