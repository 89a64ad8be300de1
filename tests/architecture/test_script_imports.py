"""The scripts outside the package (benchmarks/, scripts/, examples/) import only names the package
has: a module split into a package once left ``benchmarks/ray_throughput.py`` importing a name its
new ``__init__`` no longer exported, and the README's figure could not be reproduced. Read, never
run: the names are checked against the modules they come from."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for d in ("benchmarks", "scripts", "examples") for p in (ROOT / d).rglob("*.py"))


def _agentsched_imports(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of every ``from agentsched... import name`` in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "agentsched":
            out.extend((node.module, a.name, node.lineno) for a in node.names)
    return out


def test_there_are_scripts_to_check() -> None:
    assert any(p.parent.name == "benchmarks" for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_imported_name_exists(path: Path) -> None:
    missing = []
    for module, name, line in _agentsched_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # an extra not installed here (its own tests skip too); a module of ours never
            if (getattr(e, "name", None) or "").startswith("agentsched"):
                raise
            pytest.skip(f"{module} needs an extra not installed: {e}")
        if not hasattr(mod, name):
            try:  # ``from package import submodule``
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"line {line}: {name} from {module}")
    assert not missing, f"{path.relative_to(ROOT)} imports names its modules lack: {missing}"
