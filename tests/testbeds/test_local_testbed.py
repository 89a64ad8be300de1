"""The local testbed with the real small tools (CPU), and the CLI paths that use it."""

from __future__ import annotations

import pytest

from agentsched.errors import TestbedError
from agentsched.model.execution import Status
from agentsched.model.mapping import parse_mapping
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.testbeds.factory import make_testbed

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.tools

NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def testbed():
    tb = make_testbed("local", size="small")
    yield tb
    tb.close()


def test_factory_builds_local(testbed):
    from agentsched.testbeds.local import LocalTestbed

    assert isinstance(testbed, LocalTestbed) and testbed.size == "small" and testbed.name == "local"


def test_s2_all_cpu_runs_real_tools(testbed):
    wf = load_scenario("S2")
    m = parse_mapping(wf, "A=cpu,B=cpu,C=cpu,D=cpu")
    ex = testbed.run(wf, m)
    assert ex.status is Status.OK and ex.testbed == "local" and ex.extra["size"] == "small"
    assert ex.spans[0].task == "A" and len(ex.spans) == 4
    s = {sp.task: sp for sp in ex.spans}
    for a, b in wf.edges:
        assert s[b].start_ms >= s[a].end_ms
    assert ex.e2e_ms == pytest.approx(s["D"].end_ms) and ex.e2e_ms > 0
    assert ex.peak_vram_mb == 0 and all(sp.tool == wf.task_cards[sp.task].name for sp in ex.spans)
    d = ex.to_dict()  # the same record shape as the simulator's
    assert d["status"] == "ok" and len(d["timeline"]) == 4


def test_amplified_scenario_all_cpu(testbed):
    wf = load_scenario("S12")  # ocr x2, bert_base x12, groupby x60, image_resize x30 (fan-out)
    ex = testbed.run(wf, {t: Mode.CPU for t in wf.task_ids})
    assert ex.ok and {s.tool for s in ex.spans} == {"ocr_x2", "bert_base_x12", "groupby_x60", "image_resize_x30"}


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_gpu_mapping_without_cuda_errors(testbed):
    wf = load_scenario("S2")
    with pytest.raises(TestbedError, match=r"no CUDA GPU.*--testbed sim"):
        testbed.run(wf, parse_mapping(wf, "A=gpu,B=cpu,C=cpu,D=cpu"))


def test_a_raising_tool_is_an_error_execution():
    from agentsched.testbeds.local import LocalTestbed
    from agentsched.tools import get_tool

    def factory(name, size, seed=0):
        t = get_tool(name, size, seed=seed)
        if name == "groupby":
            t._call = lambda: (_ for _ in ()).throw(ZeroDivisionError("division by zero"))
        return t

    wf = load_scenario("S2")
    tb = LocalTestbed(size="small", tool_factory=factory)
    try:
        ex = tb.run(wf, {t: Mode.CPU for t in wf.task_ids})
    finally:
        tb.close()
    assert ex.status is Status.ERROR and ex.message == "task C (groupby) failed: ZeroDivisionError: division by zero"
    assert ex.span("D") is None


def _cli(argv, capsys):
    from agentsched.cli.main import main

    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_simulate_local_prints_timeline(capsys):
    code, out, err = _cli(
        ["simulate", "S2", "--testbed", "local", "--mapping", "A=cpu,B=cpu,C=cpu,D=cpu", "--size", "small"], capsys
    )
    assert code == 0, err
    assert "S2: ok" in out and "minilm_l6" in out and "reranker" in out


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_cli_simulate_local_gpu_without_cuda_one_line(capsys):
    code, _, err = _cli(
        ["simulate", "S2", "--testbed", "local", "--mapping", "A=gpu,B=cpu,C=cpu,D=cpu", "--size", "small"], capsys
    )
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU" in lines[0] and "--testbed sim" in lines[0]
