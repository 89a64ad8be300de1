"""Tool faults on the real testbeds stay one line each, and never hide the invocation's real result:
an ``unload()`` that raises, a ``load()`` that fails (never followed by ``unload()``), a missing
extra named as such. Real `agentsched invoke` subprocesses: what a user sees on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

TOOLS = textwrap.dedent("""
    import os

    import agentsched


    class Up(agentsched.Tool):
        name = "up"
        workload = "upper-case a text"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            return inputs["text"].upper()

        def unload(self):
            raise RuntimeError("unload boom\\nsecond line")


    class BadLoad(agentsched.Tool):
        name = "bad_load"
        workload = "a model that cannot load"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def load(self, device):
            raise OSError("weights missing")

        def run(self, inputs):
            return inputs["text"]

        def unload(self):
            open(os.environ["UNLOADED_FILE"], "a").write("unloaded\\n")


    class NeedsTorch(agentsched.Tool):
        name = "needs_torch"
        workload = "an embedder"
        tags = ("compute-bound",)
        has_gpu = False
        input_names = ("text",)

        def load(self, device):
            import torch  # noqa: F401 - the tools extra

        def run(self, inputs):
            return inputs["text"]

        def unload(self):
            import torch  # noqa: F401 - as the RAG example's embedders do

""")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "fault_tools.py").write_text(TOOLS)
    for name, cls in (("up", "Up"), ("bad", "BadLoad"), ("torchy", "NeedsTorch")):
        (tmp_path / f"{name}.yaml").write_text(f'name: {name}\ntasks:\n  A: {{tool: "fault_tools:{cls}"}}\n')
    return tmp_path


def _agentsched(project: Path, *argv: str, block_torch: bool = False) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SRC, str(project)]),
        "UNLOADED_FILE": str(project / "unloaded.txt"),
    }
    env.pop("AGENTSCHED_DEBUG", None)
    pre = "import sys; sys.modules['torch'] = None; " if block_torch else ""
    code = pre + "from agentsched.cli.main import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", "import sys; " + code, *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unload_that_raises_keeps_the_invocations_result(project):
    p = _agentsched(project, "invoke", "up.yaml", "--store", "s.db", "-i", "text=hi")
    assert p.returncode == 0, p.stderr
    assert 'output A: "HI"' in p.stdout
    assert p.stderr.splitlines() == ["warning: tool fault_tools:Up (cpu): unload failed: RuntimeError: unload boom"]
    h = _agentsched(project, "history", "up", "--store", "s.db", "--json")
    assert '"status": "ok"' in h.stdout


def test_a_tool_that_failed_to_load_is_never_unloaded(project):
    p = _agentsched(project, "invoke", "bad.yaml", "--store", "s.db", "-i", "text=hi")
    assert p.returncode == 1
    assert "failed to load: OSError: weights missing" in p.stdout
    assert p.stderr == ""  # no internal error, no unload warning
    assert not (project / "unloaded.txt").exists()


def test_a_missing_extra_is_named(project):
    p = _agentsched(project, "invoke", "torchy.yaml", "--store", "s.db", "-i", "text=hi", block_torch=True)
    assert p.returncode == 1, p.stderr
    assert "internal error" not in p.stdout + p.stderr and p.stderr == ""
    line = next(x for x in p.stdout.splitlines() if "failed to load" in x)
    assert "needs the tools extra: pip install 'agentsched[tools]'" in line


def test_a_library_that_failed_inside_its_import_is_not_called_a_missing_extra():
    from agentsched.testbeds.real import load_reason

    missing = ModuleNotFoundError("No module named 'transformers'", name="transformers")
    assert "(needs the tools extra: " in load_reason(missing)
    partial = ImportError(
        "cannot import name 'BertConfig' from partially initialized module 'transformers'", name="transformers"
    )
    assert load_reason(partial) == f"ImportError: {partial}"  # installed: the hint would mislead
