"""The ray testbed on a CPU-only Ray cluster (``ray.cluster_utils``: one head node, no GPU, no
``vram_mb``), as on a laptop without CUDA: an all-cpu mapping runs, a GPU mapping is one line.
Light fake tools (sleeps) stand in for the built-in ones. Skipped only when ray is not installed."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from agentsched.errors import TestbedError  # noqa: E402
from agentsched.model.workflow import Mode  # noqa: E402
from agentsched.scenarios import load_scenario  # noqa: E402
from agentsched.testbeds.ray import RayTestbed  # noqa: E402
from agentsched.testbeds.ray import testbed as ray_testbed  # noqa: E402
from tests.support.ray_cluster import ray_cluster  # noqa: E402
from tests.support.sleep_tool import SleepFactory  # noqa: E402

pytestmark = pytest.mark.ray

sleep_tool = SleepFactory(call_s=0.01)  # Ray ships it to the workers by value (tests/support/sleep_tool.py)


@pytest.fixture(scope="module")
def cpu_cluster():
    with ray_cluster({"num_cpus": 2, "num_gpus": 0}) as c:
        yield c


@pytest.fixture
def fake_tools(monkeypatch):
    # the CLI builds its RayTestbed with the built-in tools; these sleep instead of loading models
    monkeypatch.setattr(ray_testbed, "builtin_tool", sleep_tool)


def test_preflight_checks_gpu_placements_check_mapping_the_real_one(cpu_cluster):
    w = load_scenario("S2")
    tb = RayTestbed(tool_factory=sleep_tool)  # Ray already joined: the CPU-only cluster
    try:
        with pytest.raises(TestbedError, match="no node of the Ray cluster has a GPU"):
            tb.preflight(w)  # a policy may place any task on the GPU
        tb.check_mapping(w, {t: Mode.CPU for t in w.task_ids})  # passes: nothing to check on a GPU
        with pytest.raises(TestbedError, match=r"task A \(minilm_l6\) is mapped to gpu_now but no node"):
            tb.check_mapping(w, {"A": Mode.GPU_NOW, "B": Mode.CPU, "C": Mode.CPU, "D": Mode.CPU})
    finally:
        tb.close()


def test_throughput_default_mapping_runs_without_a_gpu_json_on_stdout(cpu_cluster, fake_tools, cli):
    code, out, err = cli("throughput", "S2", "--concurrency", "2", "--batches", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)  # stdout holds the JSON alone; the text went to stderr
    assert doc["mapping"] == {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"} and doc["concurrency"] == 2
    [batch] = doc["batches"]
    assert len(batch["executions"]) == 2 and all(e["status"] == "ok" for e in batch["executions"])
    assert "batch 0: E2E ms" in err and "throughput" in err


def test_throughput_all_cpu_mapping_json_out_file(cpu_cluster, fake_tools, cli, tmp_path):
    path = tmp_path / "tp.json"
    code, out, err = cli(
        "throughput", "S2", "-k", "2", "--batches", "1", "--mapping", "A=cpu,B=cpu,C=cpu,D=cpu", "--json-out", str(path)
    )
    assert code == 0, err
    assert "batch 0: E2E ms" in out and f"invocations written to {path}" in out
    doc = json.loads(path.read_text())
    assert doc["throughput_per_s"] > 0 and len(doc["batches"][0]["executions"]) == 2


def test_throughput_gpu_mapping_without_a_gpu_is_one_line(cpu_cluster, fake_tools, cli):
    code, out, err = cli("throughput", "S2", "-k", "2", "--batches", "1", "--mapping", "A=gpu,B=cpu,C=cpu,D=cpu")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "task A (minilm_l6) is mapped to gpu_now but no node" in err
