"""The shared machine is written once: one class advances simulated time (``testbeds/kernel.py``'s
``Kernel``, for single runs and streams alike), and the start rules are implemented once
(``model/rules.py``), imported by the stream, the live machine and the LangGraph gate.

What "advances simulated time" means here: moving a clock forward by a step (``clock += dt``), or
drawing on the simulated world's contention law (``rate_function``) or its noise (``noise_factor``).
The planner's predictor (``planner/predict.py``) is a policy's own model of the machine from its
estimates, not the machine, and is outside this rule."""

from __future__ import annotations

import ast
from pathlib import Path

import agentsched

SRC = Path(agentsched.__file__).parent
MACHINE_PARTS = ("testbeds", "service", "integrations", "experiments", "runtime", "loop")
KERNEL = ("testbeds/kernel.py", "Kernel")
SIM_ONLY_NAMES = {"rate_function", "noise_factor"}  # the world's law and noise: the kernel's to use
CLOCK_NAMES = {"now_ms", "_now", "now", "clock_ms"}


def _modules() -> list[Path]:
    return [p for part in MACHINE_PARTS for p in sorted((SRC / part).rglob("*.py"))]


def _where(tree: ast.Module) -> dict[ast.AST, str | None]:
    """Each node -> the name of the class it is in (None: module level or a plain function)."""
    out: dict[ast.AST, str | None] = {}

    def walk(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.ClassDef) else cls
            out[child] = here
            walk(child, here)

    walk(tree, None)
    return out


def _time_advancers() -> set[tuple[str, str | None]]:
    """(module, class) of every place that moves a clock by a step or uses the world's law or noise."""
    found = set()
    for path in _modules():
        tree = ast.parse(path.read_text())
        where = _where(tree)
        rel = path.relative_to(SRC).as_posix()
        for node, cls in where.items():
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                target = node.target
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                if name in CLOCK_NAMES:
                    found.add((rel, cls))
            elif isinstance(node, ast.Name) and node.id in SIM_ONLY_NAMES:
                found.add((rel, cls))
    return found


def test_one_class_advances_simulated_time():
    assert _time_advancers() == {KERNEL}


def test_the_one_run_simulator_and_the_stream_run_on_the_kernel():
    for rel in ("testbeds/sim.py", "testbeds/stream.py"):
        assert "from agentsched.testbeds.kernel import Kernel" in (SRC / rel).read_text(), rel


def _imports_rules(rel: str) -> bool:
    tree = ast.parse((SRC / rel).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.module == "agentsched.model.rules":
                return True
            if node.module == "agentsched.model" and any(a.name == "rules" for a in node.names):
                return True
    return False


def test_the_start_rules_are_imported_by_every_machine():
    for rel in (
        "testbeds/driver.py",
        "testbeds/stream.py",
        "testbeds/live_machine.py",
        "integrations/langgraph/machine.py",
        "integrations/langgraph/gate.py",
    ):
        assert _imports_rules(rel), f"{rel} does not ask the start rules of model/rules.py"


def test_no_machine_checks_vram_by_hand():
    """The fit check is the rules' (``Ledger``, ``fits_vram``): no machine compares against a budget
    with its own epsilon."""
    for path in _modules():
        text = path.read_text()
        rel = path.relative_to(SRC).as_posix()
        assert "budget_mb + " not in text and "budget_mb+" not in text, rel


def test_the_real_time_simulator_overrides_nothing_of_the_kernel():
    tree = ast.parse((SRC / "service/realtime.py").read_text())
    bases = {b.id for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for b in n.bases if isinstance(b, ast.Name)}
    assert not bases & {"StreamSim", "Kernel"}
    assert "._start" not in (SRC / "service/realtime.py").read_text()
