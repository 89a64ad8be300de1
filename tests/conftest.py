from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentsched.cli.main import main
from agentsched.model import Workflow
from agentsched.model.cards import CardSet, ToolCard
from agentsched.testbeds.world import World


@pytest.fixture
def tiny_cards() -> CardSet:
    """Hand-made cards whose timelines can be computed by hand."""
    return CardSet(
        name="tiny",
        cards={
            "x": ToolCard(name="x", cpu_ms=100, gpu_ms=10, load_ms=50, vram_mb=400),
            "y": ToolCard(name="y", cpu_ms=200, gpu_ms=20, load_ms=30, vram_mb=300),
            "z": ToolCard(name="z", cpu_ms=40, tags=("io-bound",)),
        },
    )


def make_world_doc(contention: dict[str, tuple[float, float]] | None = None, name: str = "hand") -> World:
    """A simulated world with the given per-tool (sensitivity, pressure) and no contention otherwise."""
    per_tool = {t: {"sensitivity": s, "pressure": p} for t, (s, p) in (contention or {}).items()}
    return World(name=name, contention=per_tool, default={"sensitivity": 0.0, "pressure": 0.0})


@pytest.fixture
def tiny_world() -> World:
    """The contention of ``tiny_cards``' tools: x presses and suffers at 1, y suffers at 0.5."""
    return make_world_doc({"x": (1.0, 1.0), "y": (0.5, 1.0)}, name="tiny")


@pytest.fixture
def make_world() -> Callable[..., World]:
    return make_world_doc


@pytest.fixture
def no_contention() -> World:
    """The world of the hand-made workflows: no GPU contention, so every E2E is worked out by hand."""
    return make_world_doc()


# Hand-made workflows for the loop and baseline tests: cards in memory, run in the ``no_contention``
# world unless a test gives one, so each decision can be worked out by hand (and does not move when
# the shipped world is re-fitted).
def build_workflow(
    cards: dict[str, dict[str, Any]],
    tasks: dict[str, str],
    edges: tuple = (),
    space: str = "binary",
    budget: float | None = None,
    name: str = "hand",
) -> Workflow:
    """A workflow over an in-memory card set."""
    full = {}
    for tool, c in cards.items():
        c = dict(c)
        if c.get("gpu_ms") is not None:
            c.setdefault("vram_mb", 100.0)
            c.setdefault("load_ms", 0.0)
        full[tool] = c
    wf = Workflow(name=name, tasks=tasks, edges=[list(e) for e in edges], decision_space=space, vram_budget_mb=budget)
    return wf.with_cards(CardSet(name=f"{name}-cards", cards=full))


@pytest.fixture
def make_workflow() -> Callable[..., Workflow]:
    return build_workflow


@pytest.fixture
def cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run the agentsched CLI in-process: ``cli("run", "S5", ...)`` -> (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


# The `slow` marker: the tests listed in tests/slow.txt (a node id, or a module's path for all its tests) are
# marked here, in one place, so that moving a test in or out of the fast default suite is a one-line change.
# `python -m pytest` runs the rest (pyproject's addopts: -m "not slow"); `python -m pytest -m slow` these; CI
# runs both (.ci/run).
SLOW_LIST = Path(__file__).with_name("slow.txt")


def slow_entries() -> set[str]:
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines() if SLOW_LIST.exists() else []
    return {ln.split("#", 1)[0].strip() for ln in lines} - {""}


def is_listed_slow(nodeid: str, entries: set[str]) -> bool:
    module = nodeid.split("::", 1)[0]
    return nodeid in entries or module in entries or nodeid.split("[", 1)[0] in entries


# The `gpu` marker skips without CUDA.
def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)  # the slow marks are added before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = slow_entries()
    skip = None if _cuda() else pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if is_listed_slow(item.nodeid, entries):
            item.add_marker(pytest.mark.slow)
        if skip is not None and "gpu" in item.keywords:
            item.add_marker(skip)
