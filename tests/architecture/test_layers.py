"""The package's layers: each module imports only the layers before its own (or its own package), and
no two packages import each other. Function-level imports and the policy registry's "module:Class"
targets count too, so a lazy import cannot hide a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import agentsched
from agentsched.loop.registry import REGISTRY

SRC = Path(agentsched.__file__).parent

# Rank of every top-level part of the package: a module may import parts of a lower rank, and its own
# part. Equal ranks may not import each other. The architecture, written once.
LAYERS: dict[str, int] = {
    "masking": 0,
    "errors": 1,
    "data": 1,
    "model": 2,
    "scenarios": 3,
    "tools": 3,
    "store": 3,
    "monitor": 3,
    "testbeds": 4,
    "profiler": 4,
    "oracle": 5,
    "policies": 6,
    "planner": 7,
    "agent": 8,
    "loop": 9,
    "runtime": 10,
    "integrations": 11,
    "service": 11,
    "experiments": 12,
    "report": 13,
    "cli": 14,
    "__main__": 15,
}


def _part(module: str) -> str | None:
    """'agentsched.testbeds.sim' -> 'testbeds'; the package root itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "agentsched" else None


def _module_name(path: Path, root: Path = SRC) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path = SRC) -> set[str]:
    """Every agentsched module ``path`` imports (anywhere in the file), resolving relative imports."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path, root).split(".")
    pkg = me if path.name == "__init__.py" else me[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from agentsched import experiments`
    return {m for m in out if m.split(".")[0] == "agentsched"}


def _edges() -> list[tuple[str, str, str]]:
    """(importing module, its part, imported part) for every import between parts."""
    edges = []
    for path in sorted(SRC.rglob("*.py")):
        mod = _module_name(path)
        src = _part(mod)
        if src is None:  # the package root re-exports the public API; it is not a layer
            continue
        for target in _imports(path):
            dst = _part(target)
            if dst in LAYERS and dst != src:  # (`from agentsched import __version__` names no part)
                edges.append((mod, src, dst))
    for spec in REGISTRY.values():  # the registry names its classes by string: count those imports
        edges.append(("agentsched.loop.registry", "loop", _part(spec.target.partition(":")[0]) or ""))
    return edges


def test_every_part_of_the_package_has_a_layer():
    parts = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    missing = sorted(parts - set(LAYERS))
    assert not missing, f"assign a layer in tests/architecture/test_layers.py to: {', '.join(missing)}"


def test_no_import_points_up_or_sideways():
    bad = [
        f"{mod} imports {dst} (layer {LAYERS[dst]:g} >= {LAYERS[src]:g})"
        for mod, src, dst in _edges()
        if dst != src and LAYERS.get(dst, 99) >= LAYERS[src]
    ]
    assert not bad, "\n".join(sorted(set(bad)))


def test_parts_form_no_cycle():
    graph = nx.DiGraph((src, dst) for _, src, dst in _edges() if src != dst)
    assert list(nx.simple_cycles(graph)) == []


def test_the_check_sees_lazy_and_string_imports(tmp_path):
    """The walker must see imports inside functions and relative ones, or the checks above prove nothing."""
    f = tmp_path / "agentsched" / "monitor" / "x.py"
    f.parent.mkdir(parents=True)
    f.write_text("def g():\n    from agentsched.experiments import bench\n    from ..report import plots\n")
    assert _imports(f, tmp_path / "agentsched") >= {"agentsched.experiments", "agentsched.report.plots"}
    assert ("agentsched.loop.registry", "loop", "agent") in _edges()


def test_planner_and_agent_never_see_a_testbed():
    """Decisions are made from cards and measurements: the start rules and the contention law they
    predict with live in ``model/`` (rules.py, contention.py), the simulated world in ``testbeds/``."""
    bad = [f"{mod} imports testbeds" for mod, src, dst in _edges() if src in {"planner", "agent"} and dst == "testbeds"]
    assert not bad, "\n".join(sorted(set(bad)))


def test_domain_rules_live_in_model():
    assert (SRC / "model" / "rules.py").exists() and (SRC / "model" / "contention.py").exists()
    assert not (SRC / "testbeds" / "rules.py").exists() and not (SRC / "testbeds" / "contention.py").exists()
