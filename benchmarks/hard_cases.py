"""Hard cases for agent-plan (issue 45): generators of VRAM-tight workflows, their worlds, and the robust
reference (the best mapping that stays within 1% OOM under the simulator's noise).

* ``hard_case(index, prefix, perturbed)``: a three-way workflow of 6-10 tasks (at most ``MAX_GPU_TASKS``
  GPU-capable, so its oracle enumerates at most 3^8 mappings) with two or three *large-model* tools (cards
  holding >= 1 GB: llama_1b, llama_3b, vector_search), wired as a chain, a fan-out, layers or a random DAG,
  in a world whose cards understate VRAM (``understated:SEED``, about half the tools 5-30% over their card)
  and, for ``perturbed``, whose contention differs from a5500 (``perturbed:SEED``). Its budget is set in
  that world so that the best mapping (noise-free, no budget) peaks within 1-5% of it: budget = peak x
  U(1.01, 1.05). A draw whose best mapping holds no VRAM, or whose budget would not bind (every GPU task
  at once fits), is no hard case: ``None`` (the caller takes the next index; the rule is fixed, never
  chosen by looking at a policy's results).
* ``references(case, runs)``: the noise-free oracle under the budget and the robust reference, the best
  mapping whose OOM rate over ``runs`` noisy executions is at most 1% (branch and bound over the ranking
  without a budget, whose E2E bounds each mapping's from below).
* ``large_workflow(tasks, seed)``: 50/100/200-task layered three-way workflows with a tight budget
  (tightness 0.5) and two or more large-model tools, in an understated world.

Every draw comes from ``random.Random(f"{prefix}:{index}")``: the prefix names the generator seed set
(``tune`` was used while developing the planner; the reported run uses ``report``).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from agentsched.model.cards import load_card_set
from agentsched.model.generate import MAX_REPEAT_GEN, MAX_TASK_MS, MIN_TASK_MS, generate_workflow
from agentsched.model.workflow import Mode, Workflow
from agentsched.model.workflow_io import parse_workflow
from agentsched.testbeds.sim import SimTestbed

LARGE_MODEL_MB = 1000.0  # a card holding at least this much VRAM is a large-model tool
MAX_GPU_TASKS = 8  # the oracle enumerates 3^8 = 6561 mappings at most
TOPOLOGIES = ("chain", "fan-out", "layered", "random")
NOISE = 0.03
MAX_OOM_RATE = 0.01


@dataclass(frozen=True)
class HardCase:
    workflow: Workflow
    world: str
    oracle_peak_mb: float  # the best mapping's peak VRAM in its world (noise-free)
    # the best mappings without a budget, by noise-free E2E: lower bounds of their E2E under the budget
    free_ranking: tuple[tuple[tuple[Mode, ...], float], ...]


def free_ranking(wf: Workflow, tb: SimTestbed, keep: int = 400) -> list[tuple[tuple[Mode, ...], float, float]]:
    """Every mapping (host-only tasks on the CPU: a GPU placement of them is the same run) by noise-free E2E
    without a budget: (key, E2E, peak VRAM), the best ``keep``."""
    modes = wf.decision_space.modes
    choices = [modes if c.has_gpu else (Mode.CPU,) for c in (wf.task_cards[t] for t in wf.task_ids)]
    out = []
    for key in itertools.product(*choices):
        x = tb.expected(wf, dict(zip(wf.task_ids, key, strict=True)))
        if x is not None and x.ok:
            out.append((key, float(x.e2e_ms), float(x.peak_vram_mb)))  # type: ignore[arg-type]
    out.sort(key=lambda r: (r[1], [m.value for m in r[0]]))
    return out[:keep]


def _edges(topology: str, ids: list[str], rng: random.Random) -> list[tuple[str, str]]:
    if topology == "chain":
        return [(ids[i], ids[i + 1]) for i in range(len(ids) - 1)]
    if topology == "fan-out":
        return []
    if topology == "layered":
        width = max(1, round(math.sqrt(len(ids))))
        layers = [ids[i : i + width] for i in range(0, len(ids), width)]
        return [
            (p, t)
            for prev, layer in zip(layers, layers[1:], strict=False)
            for t in layer
            for p in rng.sample(prev, min(len(prev), rng.choice((1, 2))))
        ]
    return [(ids[i], ids[j]) for j in range(1, len(ids)) for i in range(max(0, j - 8), j) if rng.random() < 0.25]


def _tools(n: int, rng: random.Random) -> list[str]:
    """Two or three large-model tools, the rest drawn from every card; GPU-capable at most MAX_GPU_TASKS."""
    cs = load_card_set("a5500")
    large = sorted(t for t, c in cs.cards.items() if (c.vram_mb or 0) >= LARGE_MODEL_MB and c.has_gpu)
    host = sorted(t for t, c in cs.cards.items() if not c.has_gpu)
    tools = rng.sample(large, rng.choice((2, 3)))
    rest = sorted(cs.cards)
    while len(tools) < n:
        gpu = sum(1 for t in tools if cs.cards[t].has_gpu)
        tools.append(rng.choice(host if gpu >= MAX_GPU_TASKS else rest))
    rng.shuffle(tools)
    return tools


def _doc(name: str, tools: list[str], edges: list[tuple[str, str]], rng: random.Random) -> dict:
    cs = load_card_set("a5500")
    ids = [chr(ord("A") + i) for i in range(len(tools))]
    spec = {}
    for t, tool in zip(ids, tools, strict=True):
        card = cs.cards[tool]
        target = math.exp(rng.uniform(math.log(MIN_TASK_MS), math.log(MAX_TASK_MS)))
        unit = card.gpu_ms if card.gpu_ms is not None else card.cpu_ms
        spec[t] = {"tool": tool, "repeat": max(1, min(MAX_REPEAT_GEN, round(target / unit)))}
    return {
        "name": name,
        "cards": "a5500",
        "decision_space": "three_way",
        "tasks": spec,
        "edges": [list(e) for e in edges],
    }


def hard_case(index: int, prefix: str, perturbed: bool) -> HardCase | None:
    """The hard case ``index`` of generator set ``prefix`` in its default (understated) or perturbed world."""
    rng = random.Random(f"{prefix}:{index}")
    n = rng.randint(6, 10)
    topology = TOPOLOGIES[index % 4]
    tools = _tools(n, rng)
    ids = [chr(ord("A") + i) for i in range(n)]
    doc = _doc(f"hard-{prefix}-{index}-{topology}-n{n}", tools, _edges(topology, ids, rng), rng)
    world = f"understated:{rng.randrange(10_000)}"
    if perturbed:
        world += f":perturbed:{rng.randrange(10_000)}"
        doc["name"] += "-p"
    free = parse_workflow(doc, doc["name"])
    tb = SimTestbed(noise_sigma=0, world=world)
    ranking = free_ranking(free, tb)
    peak = ranking[0][2]
    real = tb.current_world.real_cards(free.task_cards)
    total = sum(c.vram_needed_mb for c in real.values())
    budget = round(peak * rng.uniform(1.01, 1.05), 1)
    if peak <= 0 or total <= budget:
        return None
    wf = parse_workflow({**doc, "vram_budget_mb": budget}, doc["name"])
    return HardCase(wf, world, peak, tuple((k, e) for k, e, _ in ranking))


def hard_cases(count: int, prefix: str, perturbed: bool, start: int = 0) -> list[HardCase]:
    """The first ``count`` hard cases of set ``prefix`` (indices from ``start``, draws that are no hard case skipped)."""
    out: list[HardCase] = []
    i = start
    while len(out) < count:
        c = hard_case(i, prefix, perturbed)
        if c is not None:
            out.append(c)
        i += 1
    return out


def oom_rate(wf: Workflow, world: str, mapping, runs: int, rng: random.Random, stop_after: int | None = None) -> float:
    """Share of ``runs`` noisy executions of ``mapping`` that fail (stops early past ``stop_after`` failures)."""
    tb = SimTestbed(noise_sigma=NOISE, world=world)
    failed = 0
    for i in range(runs):
        failed += not tb.run(wf, dict(mapping), rng=rng).ok
        if stop_after is not None and failed > stop_after:
            return failed / (i + 1)
    return failed / runs


def reference_ms(wf: Workflow, world: str, mapping, cache: dict) -> float | None:
    """Noise-free E2E of ``mapping`` under the budget in ``world`` (None: out of memory), cached."""
    key = tuple(mapping[t] for t in wf.task_ids)
    if key not in cache:
        x = SimTestbed(noise_sigma=0, world=world).expected(wf, dict(mapping))
        cache[key] = float(x.e2e_ms) if x is not None and x.ok else None  # type: ignore[arg-type]
    return cache[key]


def references(case: HardCase, runs: int = 100, cache: dict | None = None) -> tuple[float, float, dict]:
    """(noise-free oracle E2E, robust reference E2E, its mapping) under the budget: the best mapping, and the
    best whose OOM rate over ``runs`` noisy executions is at most 1%. Branch and bound over the free ranking
    (a mapping's E2E without a budget bounds it with one from below)."""
    wf, world = case.workflow, case.world
    cache = {} if cache is None else cache
    rng = random.Random(f"robust-ref:{wf.name}")
    allowed = int(MAX_OOM_RATE * runs)
    oracle = robust = math.inf
    robust_map: dict = {t: Mode.CPU for t in wf.task_ids}
    for key, free_ms in case.free_ranking:
        if free_ms >= robust:
            break
        m = dict(zip(wf.task_ids, key, strict=True))
        ms = reference_ms(wf, world, m, cache)
        if ms is None:
            continue
        oracle = min(oracle, ms)
        if ms < robust and oom_rate(wf, world, m, runs, rng, stop_after=allowed) <= MAX_OOM_RATE:
            robust, robust_map = ms, m
    if not math.isfinite(robust):
        robust = reference_ms(wf, world, robust_map, cache) or math.inf
    return oracle, robust, robust_map


def large_workflow(tasks: int, seed: int, prefix: str) -> tuple[Workflow, str]:
    """A large layered three-way workflow with a tight budget (tightness 0.5), at least two large-model tools
    (two tasks re-drawn onto them), in an understated world."""
    wf = generate_workflow(tasks=tasks, topology="layered", space="three_way", budget_tightness=0.5, seed=seed)
    rng = random.Random(f"{prefix}:large:{tasks}:{seed}")
    doc = {
        "name": f"{wf.name}-{prefix}",
        "cards": "a5500",
        "decision_space": "three_way",
        "tasks": {t: {"tool": s.tool, "repeat": s.repeat} for t, s in wf.tasks.items()},
        "edges": [list(e) for e in wf.edges],
    }
    cs = load_card_set("a5500")
    large = sorted(t for t, c in cs.cards.items() if (c.vram_mb or 0) >= LARGE_MODEL_MB and c.has_gpu)
    for t in rng.sample(wf.task_ids, 2):
        tool = rng.choice(large)
        doc["tasks"][t] = {"tool": tool, "repeat": max(1, round(rng.uniform(50, 800) / cs.cards[tool].gpu_ms))}
    vram = sorted(cs.resolve(s["tool"], s["repeat"]).vram_needed_mb for s in doc["tasks"].values())
    gpu = [v for v in vram if v > 0]
    doc["vram_budget_mb"] = round(max(max(gpu) * 1.3, 0.5 * sum(gpu)), 1)
    return parse_workflow(doc, doc["name"]), f"understated:{rng.randrange(10_000)}"
