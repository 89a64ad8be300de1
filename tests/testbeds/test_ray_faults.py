"""A tool fault on a real local Ray instance stays one line: no "Unhandled error" tracebacks from
Ray on stderr, and a task over --task-timeout-s ends its execution as error. `agentsched invoke`
subprocesses (what a user sees)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")

SRC = str(Path(__file__).resolve().parents[2] / "src")

TOOLS = textwrap.dedent("""
    import time

    import agentsched


    class Boom(agentsched.Tool):
        name = "boom"
        workload = "raises"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            if inputs["text"] == "hang":
                time.sleep(600)
            raise ValueError("boom on ray\\nsecond line")
""")


def _invoke(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "ray_fault_tools.py").write_text(TOOLS)
    (tmp_path / "boom.yaml").write_text('name: boom\ntasks:\n  A: {tool: "ray_fault_tools:Boom"}\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path)])}
    env.pop("AGENTSCHED_DEBUG", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsched.cli.main",
            "invoke",
            "boom.yaml",
            "--testbed",
            "ray",
            "--cpu-slots",
            "1",
            "--store",
            "s.db",
            "--json",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_tool_raising_on_ray_is_one_line(tmp_path):
    p = _invoke(tmp_path, "-i", "text=x")
    assert p.returncode == 1
    assert json.loads(p.stdout)["message"] == "task A (ray_fault_tools:Boom) failed: ValueError: boom on ray"
    assert p.stderr == ""  # no "Unhandled error" traceback from Ray


def test_a_task_over_its_timeout_on_ray_is_an_error(tmp_path):
    p = _invoke(tmp_path, "-i", "text=hang", "--task-timeout-s", "2")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["message"] == (
        "task A (ray_fault_tools:Boom) failed: TimeoutError: ran longer than its timeout of 2 s (--task-timeout-s)"
    )
    assert p.stderr == ""


def test_rays_errors_that_say_the_machine_failed_are_machine_lost_and_the_tools_own_are_not():
    import ray.exceptions as rex

    from agentsched.testbeds.driver import MachineLost
    from agentsched.testbeds.ray.backend import machine_lost

    for exc in (rex.LocalRayletDiedError(), rex.NodeDiedError("node 5f2c died")):
        lost = machine_lost(exc)
        assert isinstance(lost, MachineLost) and str(lost).startswith(type(exc).__name__ + ": ")
    # the tool or its placement may have caused these (a crash on its device, an output a CUDA tensor
    # that cannot be read back where there is no CUDA: a RaySystemError), or a timeout
    for exc in (
        ValueError("a tool's own"),
        rex.WorkerCrashedError(),
        rex.GetTimeoutError("slow"),
        rex.RaySystemError("Failed to unpickle serialized exception: deserialize object on a CUDA device"),
    ):
        assert machine_lost(exc) is exc


def test_a_worker_warm_up_that_times_out_never_fails_the_run_and_is_not_retried(monkeypatch):
    """Before, the warm-up waited for the task timeout and its GetTimeoutError stopped a Runtime."""
    import ray.exceptions as rex

    from agentsched.model.workflow import Mode
    from agentsched.testbeds.ray import cluster as cl
    from agentsched.testbeds.ray.placement import NodeInfo

    asked: list[float] = []

    class Busy:  # a cluster whose idle tasks cannot start now
        def get(self, refs, timeout=None):
            asked.append(timeout)
            raise rex.GetTimeoutError("Get timed out: some object(s) not ready.")

    class Idle:
        def options(self, **kw):
            return self

        def remote(self, s):
            return object()

    monkeypatch.setattr(cl, "ray_module", lambda: Busy())
    monkeypatch.setattr(cl, "remote", lambda name: Idle())
    c = cl.Cluster(
        address="auto",
        size="small",
        seed=0,
        emulate_gpu=True,
        emulated_gpus=1,
        cpu_slots=2,
        vram_mb=None,
        timeout_s=2.0,
        torch_threads=None,
        tool_factory=None,
    )  # type: ignore[arg-type]
    node = NodeInfo(node_id="n1", cpus=2, gpus=0, vram_mb=0)
    c.start_workers({"A": Mode.CPU, "B": Mode.CPU}, 1, [node], 2)  # no exception
    c.start_workers({"A": Mode.CPU, "B": Mode.CPU}, 1, [node], 2)
    assert asked == [cl.WORKER_WARMUP_S]  # waited once, its own bound (not the task timeout of 2 s)


def test_a_load_past_its_deadline_is_said_in_words_naming_the_setting():
    """Before, it was Ray's own text: "GetTimeoutError: Get timed out: some object(s) not ready."."""
    import ray.exceptions as rex

    from agentsched.testbeds.ray.backend import LOAD_TIMEOUT_S, load_error

    message = load_error(rex.GetTimeoutError("Get timed out: some object(s) not ready."))
    assert message == (
        f"loading the tools on the Ray cluster did not end within {LOAD_TIMEOUT_S:g} s (the load "
        "deadline, agentsched.testbeds.ray.backend.LOAD_TIMEOUT_S; --task-timeout-s bounds runs, "
        "not loads)"
    )
    assert load_error(ValueError("no such model")) == (
        "loading the tools on the Ray cluster failed: ValueError: no such model"
    )
