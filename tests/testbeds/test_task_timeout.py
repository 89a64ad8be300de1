"""A tool that hangs: --task-timeout-s ends its execution as `error` in one line naming the task and
the timeout (its instance dropped, built afresh next time), and Ctrl-C twice ends `invoke` at once
(exit 130). Real `agentsched` subprocesses and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

TOOLS = textwrap.dedent("""
    import os
    import threading

    import agentsched


    if os.environ.get("SLOW_EXIT"):  # an exit step of 1.5 s, which says when it starts
        import atexit
        import pathlib
        import time

        atexit.register(lambda: (pathlib.Path("exiting").touch(), time.sleep(1.5)))


    class Hang(agentsched.Tool):
        name = "hang"
        workload = "a call that never returns"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def load(self, device):
            open(os.environ["LOADS_FILE"], "a").write("load\\n")

        def run(self, inputs):
            if inputs["text"] == "hang":
                print("started", flush=True)
                threading.Event().wait()  # forever; ignores stop requests
            return inputs["text"]
""")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "hang_tools.py").write_text(TOOLS)
    (tmp_path / "hang.yaml").write_text('name: hang\ntasks:\n  A: {tool: "hang_tools:Hang"}\n')
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(project)]), "LOADS_FILE": str(project / "loads.txt")}
    env.pop("AGENTSCHED_DEBUG", None)
    return env


def _cmd(*argv: str, prelude: str = "") -> list[str]:
    """The console command (``main()`` reads sys.argv, as the installed script does)."""
    return [sys.executable, "-c", f"{prelude}from agentsched.cli.main import main; main()", *argv]


def test_a_task_over_its_timeout_ends_the_execution_as_error(project):
    p = subprocess.run(
        _cmd("invoke", "hang.yaml", "--store", "s.db", "-i", "text=hang", "--task-timeout-s", "1", "--json"),
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1, p.stderr
    import json

    doc = json.loads(p.stdout[p.stdout.index("{") :])  # (the tool printed 'started' first)
    assert doc["status"] == "error"
    assert doc["message"] == (
        "task A (hang_tools:Hang) failed: TimeoutError: ran longer than its timeout of 1 s (--task-timeout-s)"
    )
    assert p.stderr == ""


def test_the_timed_out_instance_is_built_afresh_next_time():
    from agentsched.model.workflow import Mode
    from agentsched.runtime import workflow_from_tools
    from agentsched.testbeds.local import LocalTestbed

    loads: list[str] = []
    unloads: list[bool] = []  # per unload: was its call still running?

    import agentsched

    class Slow(agentsched.Tool):
        name, has_gpu, tags, workload = "slow", False, ("compute-light",), "sleeps when asked"

        def load(self, device):
            loads.append(device)

        def run(self, inputs):
            if inputs.get("x") == "hang":
                self.running = True
                time.sleep(1.5)
                self.running = False
            return "ok"

        def unload(self):
            unloads.append(getattr(self, "running", False))

    wf = workflow_from_tools("slow", {"A": Slow})
    tb = LocalTestbed(task_timeout_s=0.3, cpu_workers=1)
    try:
        first = tb.run(wf, {"A": Mode.CPU}, inputs={"x": "hang"})
        assert first.status.value == "error" and "its timeout of 0.3 s" in first.message
        second = tb.run(wf, {"A": Mode.CPU}, inputs={"x": "go"})
        assert second.ok and second.outputs["A"] == "ok"
        assert loads == ["cpu", "cpu"]  # loaded again: the hung instance was dropped
        third = tb.run(wf, {"A": Mode.CPU}, inputs={"x": "go"})
        assert third.ok and loads == ["cpu", "cpu"]  # the new instance is kept warm
        deadline = time.monotonic() + 10
        while not unloads and time.monotonic() < deadline:  # the hung call returns: then it is unloaded
            time.sleep(0.05)
        assert unloads == [False]  # once, never while its call ran
    finally:
        tb.close()


def _ctrl_c_twice(project: Path, between, prelude: str = "", env: dict[str, str] | None = None):
    """Start `invoke` on the hanging tool, Ctrl-C once it runs, ``between(p)``, Ctrl-C again: (status, stderr)."""
    p = subprocess.Popen(
        _cmd("invoke", "hang.yaml", "--store", "s.db", "-i", "text=hang", prelude=prelude),
        cwd=project,
        env=env or _env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "started"  # the tool hangs now
        p.send_signal(signal.SIGINT)
        between(p)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")
def test_ctrl_c_twice_ends_an_invoke_whose_tool_hangs(project):
    code, err = _ctrl_c_twice(project, lambda p: time.sleep(0.5))
    assert code == 130
    assert err.splitlines() == ["error: interrupted"]


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")
@pytest.mark.parametrize("exit_step", ["before", "after"])
def test_ctrl_c_while_the_process_exits_keeps_its_status(project, exit_step):
    """The second Ctrl-C lands in a slow exit step (1.5 s). Before this was handled, a Ctrl-C late in
    the exit met Python's default handler: status -2 and no ``error:`` line (a flaky CI failure).
    "before": the step runs before agentsched's last one (a tool's own atexit hook): the Ctrl-C
    exits at once. "after": it runs after it (registered before the command started): the exit is
    decided, the Ctrl-C is ignored and the step finishes."""
    done = (
        "import atexit, pathlib, time; atexit.register(lambda: (pathlib.Path('exiting').touch(), "
        "time.sleep(1.5), pathlib.Path('done').touch())); "
    )
    prelude, env = (done, _env(project)) if exit_step == "after" else ("", {**_env(project), "SLOW_EXIT": "1"})

    def until_exiting(p):
        deadline = time.monotonic() + 20
        while not (project / "exiting").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert p.poll() is None  # the run is cut: the process is in its slow exit step now

    code, err = _ctrl_c_twice(project, until_exiting, prelude=prelude, env=env)
    assert code == 130
    assert err.splitlines() == ["error: interrupted"]
    assert (project / "done").exists() == (exit_step == "after")


@pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")
@pytest.mark.parametrize(
    "sig, status, line, why",
    [
        ("SIGINT", 130, "interrupted", "interrupted (Ctrl-C)"),
        # SIGTERM is what `timeout` and supervisors send: before, it killed `invoke` (no line, no record)
        ("SIGTERM", 143, "terminated", "terminated (SIGTERM)"),
    ],
)
def test_one_signal_ends_an_invoke_whose_tool_hangs_and_keeps_its_record(project, sig, status, line, why):
    """Before, the first Ctrl-C waited for the tool to return (forever here) and the invocation was
    never recorded."""
    p = subprocess.Popen(
        _cmd("invoke", "hang.yaml", "--store", "s.db", "-i", "text=hang"),
        cwd=project,
        env=_env(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "started"  # the tool hangs now
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == status and err.splitlines() == [f"error: {line}"]
    h = subprocess.run(
        _cmd("history", "hang", "--store", "s.db", "--json"),
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=60,
    )
    import json

    (ex,) = json.loads(h.stdout)["learners"][0]["executions"]
    assert ex["status"] == "error" and ex["kind"] == "cut" and ex["message"].startswith(why)
