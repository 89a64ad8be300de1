"""Torch-free workflows never import torch (2 s per command where it is installed): `--help`,
`run` on the simulator, and `invoke` of a user workflow whose tools import nothing heavy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentsched.tools import _GPU_DEVICE_FILES
from tests.support.echo_tool import ECHO_TOOLS

SRC = str(Path(__file__).resolve().parents[2] / "src")

TOOLS = ECHO_TOOLS

# runs the CLI in-process, then reports which heavy modules it imported (on stderr's last line)
PROBE = (
    "import sys\nfrom agentsched.cli.main import main\ncode = 0\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
    "    code = e.code\nheavy = sorted(m for m in ('torch', 'transformers', 'ray', 'matplotlib') "
    "if m in sys.modules)\nprint('HEAVY=' + ','.join(heavy), file=sys.stderr)\nsys.exit(code)\n"
)


def _heavy(cwd: Path, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(cwd)])}
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return p.stderr.strip().splitlines()[-1]


def test_help_imports_no_torch(tmp_path):
    assert _heavy(tmp_path, "--help") == "HEAVY="


def test_run_on_the_simulator_imports_no_torch(tmp_path):
    assert _heavy(tmp_path, "run", "S1", "-p", "heft", "--rounds", "1", "--repeats", "1") == "HEAVY="


def test_invoke_of_a_torch_free_workflow_imports_no_torch(tmp_path):
    (tmp_path / "notorch_tools.py").write_text(TOOLS)
    (tmp_path / "echo.yaml").write_text('name: echo\ntasks:\n  A: {tool: "notorch_tools:Echo"}\n')
    assert _heavy(tmp_path, "invoke", "echo.yaml", "--store", "s.db", "-i", "text=hi") == "HEAVY="


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(os.path.exists(f) for f in _GPU_DEVICE_FILES),
    reason="a GPU driver is present: torch is asked whether CUDA works",
)
def test_a_gpu_capable_torch_free_tool_imports_no_torch_without_a_gpu_driver(tmp_path):
    # the CUDA check is what imported torch: without a driver's device files there is no CUDA to find
    (tmp_path / "notorch_tools.py").write_text(TOOLS.replace("has_gpu = False", "has_gpu = True"))
    (tmp_path / "echo.yaml").write_text('name: echo\ntasks:\n  A: {tool: "notorch_tools:Echo"}\n')
    assert _heavy(tmp_path, "invoke", "echo.yaml", "--store", "s.db", "-i", "text=hi") == "HEAVY="
