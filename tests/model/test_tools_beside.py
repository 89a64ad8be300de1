"""Tool modules are found beside the workflow file first, then in the current directory (issue 48, item 10);
a module found nowhere is one line that says what to do."""

from __future__ import annotations

import sys

import pytest

from agentsched.errors import AgentschedError
from agentsched.model import tool as tool_mod
from agentsched.model.tool import resolve_tool
from agentsched.model.workflow_io import load_workflow_file

TOOL = """
import agentsched

class Count(agentsched.Tool):
    workload = "{where}"
    def run(self, inputs):
        return {{"n": 1}}
"""


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """A fresh search path and module cache for each test's made-up tool module."""
    monkeypatch.setattr(tool_mod, "_BESIDE_WORKFLOWS", [])
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    yield
    for name in [m for m in sys.modules if m.startswith("beside_")]:
        del sys.modules[name]


def _workflow(folder, module: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "wf.yaml").write_text(f'name: counting\ntasks:\n  A: {{tool: "{module}:Count"}}\n')


def test_a_tool_module_beside_the_workflow_file_is_found_from_another_folder(tmp_path, monkeypatch, isolated):
    tools, elsewhere = tmp_path / "tools", tmp_path / "work"
    _workflow(tools, "beside_count")
    (tools / "beside_count.py").write_text(TOOL.format(where="beside"))
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    wf = load_workflow_file("../tools/wf.yaml")
    assert wf.task_cards["A"].workload == "beside"
    assert resolve_tool("beside_count:Count").workload == "beside"


def test_beside_the_workflow_file_comes_before_the_current_directory(tmp_path, monkeypatch, isolated):
    tools, here = tmp_path / "tools", tmp_path / "here"
    _workflow(tools, "beside_twice")
    (tools / "beside_twice.py").write_text(TOOL.format(where="beside"))
    here.mkdir()
    (here / "beside_twice.py").write_text(TOOL.format(where="cwd"))
    monkeypatch.chdir(here)
    load_workflow_file(tools / "wf.yaml")
    assert resolve_tool("beside_twice:Count").workload == "beside"


def test_a_module_found_nowhere_says_where_it_looked_and_what_to_do(tmp_path, monkeypatch, isolated):
    tools = tmp_path / "tools"
    _workflow(tools, "beside_missing")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AgentschedError) as e:
        _ = load_workflow_file(tools / "wf.yaml").task_cards
    text = str(e.value)
    assert "\n" not in text and "no module named 'beside_missing'" in text and str(tools) in text
    assert "put beside_missing.py beside the workflow file" in text
