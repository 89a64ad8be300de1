"""Random workflows beyond the paper's 13 scenarios (``agentsched generate``).

A generated workflow draws its tools from a card set, each task amplified (``repeat``) so that its
GPU latency (CPU latency for host-only tools) lands between ``MIN_TASK_MS`` and ``MAX_TASK_MS`` (log-uniform), wires them by a
topology, and sets the VRAM budget from a tightness in [0, 1): 0 means no budget, t > 0 a budget
of (1 - t) x the VRAM of every GPU-capable task together (never below the largest single one, so
some GPU placement always fits). Everything is drawn from ``random.Random(f"{seed}:{index}")``:
the same arguments give the same files.
"""

from __future__ import annotations

import enum
import math
import random
from pathlib import Path

import yaml

from agentsched.errors import WorkflowError
from agentsched.model.cards import load_card_set
from agentsched.model.workflow import DecisionSpace, Workflow
from agentsched.model.workflow_io import parse_workflow

MAX_TASKS = 5000
MIN_TASK_MS = 30.0  # a generated task's GPU latency (CPU for host-only tools), log-uniform in this range
MAX_TASK_MS = 1500.0
MAX_REPEAT_GEN = 400  # amplification cap of a generated task
MAX_COUNT = 10_000


class Topology(str, enum.Enum):
    CHAIN = "chain"  # A -> B -> C ...
    FAN_OUT = "fan-out"  # independent tasks (the paper's fanout scenarios)
    LAYERED = "layered"  # layers of ~sqrt(n) tasks, each fed by 1-2 tasks of the previous layer
    RANDOM = "random"  # random DAG over a random order, ~2 predecessors per task on average

    def __str__(self) -> str:
        return self.value


def _parse(enum_cls: type[enum.Enum], value: str, what: str) -> enum.Enum:
    try:
        return enum_cls(str(value).strip().lower())
    except ValueError:
        valid = ", ".join(e.value for e in enum_cls)  # type: ignore[attr-defined]
        raise WorkflowError(f"unknown {what} {value!r} (valid: {valid})") from None


def check_args(tasks: int, budget_tightness: float, count: int) -> None:
    """One-line errors for arguments out of range."""
    if isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= MAX_TASKS:
        raise WorkflowError(f"--tasks must be an integer in [1, {MAX_TASKS}], got {tasks!r}")
    if not (
        isinstance(budget_tightness, (int, float)) and math.isfinite(budget_tightness) and 0 <= budget_tightness < 1
    ):
        raise WorkflowError(f"--budget-tightness must be in [0, 1), got {budget_tightness!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise WorkflowError(f"--count must be an integer in [1, {MAX_COUNT}], got {count!r}")


def _edges(topology: Topology, ids: list[str], rng: random.Random) -> list[tuple[str, str]]:
    n = len(ids)
    if topology is Topology.CHAIN:
        return [(ids[i], ids[i + 1]) for i in range(n - 1)]
    if topology is Topology.FAN_OUT:
        return []
    if topology is Topology.LAYERED:
        width = max(1, round(math.sqrt(n)))
        layers = [ids[i : i + width] for i in range(0, n, width)]
        edges = []
        for prev, layer in zip(layers, layers[1:], strict=False):
            for t in layer:
                for p in rng.sample(prev, min(len(prev), rng.choice((1, 2)))):
                    edges.append((p, t))
        return edges
    prob = 0.25  # ~2 predecessors per task once the window below is full
    edges = []
    for j in range(1, n):
        window = range(max(0, j - 8), j)  # why: local edges keep the DAG shallow-ish and varied
        for i in window:
            if rng.random() < prob:
                edges.append((ids[i], ids[j]))
    return edges


def generate_workflow(
    *,
    tasks: int,
    topology: str = "layered",
    space: str = "binary",
    budget_tightness: float = 0.0,
    cards: str = "a5500",
    seed: int = 0,
    index: int = 0,
) -> Workflow:
    """One random workflow (validated like a workflow file)."""
    check_args(tasks, budget_tightness, 1)
    topo = _parse(Topology, topology, "topology")
    dspace = _parse(DecisionSpace, space.replace("-", "_"), "decision space")
    cs = load_card_set(cards)
    rng = random.Random(f"{seed}:{index}")
    tools = sorted(cs.cards)
    ids = [f"T{i}" for i in range(tasks)] if tasks > 26 else [chr(ord("A") + i) for i in range(tasks)]
    spec: dict[str, dict] = {}
    for t in ids:
        tool = rng.choice(tools)
        card = cs.cards[tool]
        target = math.exp(rng.uniform(math.log(MIN_TASK_MS), math.log(MAX_TASK_MS)))
        # why the GPU latency: sized on it, GPU tasks are long enough for contention, loads and the
        # budget to matter (sized on the CPU latency, most GPU runs would be a few ms and trivial)
        unit_ms = card.gpu_ms if card.gpu_ms is not None else card.cpu_ms
        repeat = max(1, min(MAX_REPEAT_GEN, round(target / unit_ms)))
        spec[t] = {"tool": tool, "repeat": repeat}
    edges = _edges(topo, ids, rng)  # type: ignore[arg-type]
    name = f"gen-{topo.value}-{dspace.value}-n{tasks}-s{seed}-{index}"  # type: ignore[union-attr]
    doc = {
        "name": name,
        "cards": cards,
        "decision_space": dspace.value,  # type: ignore[union-attr]
        "description": f"generated: {tasks} tasks, {topo.value}, budget tightness {budget_tightness:g}, seed {seed}",
        "tasks": spec,
        "edges": [list(e) for e in edges],
    }
    if budget_tightness > 0:
        vram = [cs.resolve(s["tool"], s["repeat"]).vram_needed_mb for s in spec.values()]
        gpu = [v for v in vram if v > 0]
        if gpu:
            doc["vram_budget_mb"] = round(max(max(gpu), (1 - budget_tightness) * sum(gpu)), 1)
    return parse_workflow(doc, name)


def workflow_yaml(wf: Workflow) -> str:
    """A workflow as the YAML file format."""
    doc: dict = {
        "name": wf.name,
        "description": wf.description,
        "cards": wf.cards,
        "decision_space": wf.decision_space.value,
    }
    if wf.vram_budget_mb is not None:
        doc["vram_budget_mb"] = wf.vram_budget_mb
    doc["tasks"] = {
        t: ({"tool": k.tool, "repeat": k.repeat} if k.repeat > 1 else {"tool": k.tool}) for t, k in wf.tasks.items()
    }
    doc["edges"] = [list(e) for e in wf.edges]
    return yaml.safe_dump(doc, sort_keys=False, width=120)


def generate_suite(out_dir: str | Path, *, count: int = 1, seed: int = 0, **kwargs) -> list[Path]:
    """Write ``count`` workflows (index 0..count-1) as YAML files into ``out_dir``; return the paths."""
    check_args(kwargs.get("tasks", 1), kwargs.get("budget_tightness", 0.0), count)
    wfs = [generate_workflow(seed=seed, index=i, **kwargs) for i in range(count)]
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for wf in wfs:
            p = out / f"{wf.name}.yaml"
            p.write_text(workflow_yaml(wf))
            paths.append(p)
    except OSError as e:
        raise WorkflowError(f"cannot write generated workflows in {out}: {e.strerror or e}") from None
    return paths
