"""The examples as a new user meets them (issue 48, item 14): the start command curl.sh names works from
examples/serve, what the serve example writes is ignored by git, and make_docs.py without the tools extra
is one line."""

from __future__ import annotations

import fnmatch
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from agentsched.model import tool as tool_mod
from agentsched.model.tool import tool_class
from agentsched.scenarios import resolve_workflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_start_command_curl_sh_names_loads_every_workflow_with_its_tools(tmp_path, monkeypatch):
    text = (EXAMPLES / "serve" / "curl.sh").read_text()
    command = next(line.lstrip("# ").split() for line in text.splitlines() if "agentsched serve" in line)
    assert command[:2] == ["agentsched", "serve"]
    served = command[2]  # the folder the command serves, relative to examples/serve
    shutil.copytree(EXAMPLES / "serve", tmp_path / "serve")
    monkeypatch.chdir(tmp_path / "serve")  # "from this folder", with nothing of it on the path
    monkeypatch.setattr(tool_mod, "_BESIDE_WORKFLOWS", [])
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.delitem(sys.modules, "serve_tools", raising=False)
    files = sorted(Path(served).glob("*.yaml"))
    assert files
    for f in files:
        wf = resolve_workflow(str(f))
        for task in wf.tasks.values():
            assert tool_class(task.tool).__module__ == "serve_tools"
    sys.modules.pop("serve_tools", None)


@pytest.mark.parametrize("written", ["serve.db", "workflows/serve.db-wal", "sim.db-shm", "workflows/__pycache__/x.pyc"])
def test_what_the_serve_example_writes_is_ignored(written):
    patterns = [
        p.strip()
        for p in (EXAMPLES / "serve" / ".gitignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    parts = Path(written).parts
    assert any(fnmatch.fnmatch(parts[-1], p) or (p.endswith("/") and p.rstrip("/") in parts[:-1]) for p in patterns)


def test_make_docs_without_the_tools_extra_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fpdf", None)  # an import of fpdf fails as without the extra
    spec = importlib.util.spec_from_file_location("rag_make_docs_no_fpdf", EXAMPLES / "rag" / "make_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(str(tmp_path / "docs"))
    assert str(e.value) == "error: make_docs.py needs fpdf2, part of the tools extra: pip install -e '.[tools]'"
