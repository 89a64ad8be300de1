"""A scripted fake testbed and hand-made workflows whose outcomes are known by construction.

Semantics (fan-out only, every task ready at t=0):
* cpu and gpu_now tasks start at 0 and take ``latency[(task, mode)]`` ms;
* gpu_now VRAM is summed in task order; the first start past the budget makes the run OOM;
* gpu_queue tasks run one after another once the last gpu_now task ends, each paying ``load_ms``
  first; a queued task larger than the whole budget is OOM.
E2E is the last end. No noise: one run per mapping says everything.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed

TASKS = ("A", "B", "C", "D")

# hand-made cards: (cpu_ms, gpu_ms, load_ms, vram_mb, tags)
CARDS = {
    "alpha": (1000.0, 100.0, 300.0, 400.0, ("compute-bound",)),
    "beta": (800.0, 100.0, 200.0, 300.0, ("compute-bound",)),
    "gamma": (600.0, 100.0, 100.0, 200.0, ("compute-bound",)),
    "delta": (150.0, 50.0, 900.0, 50.0, ("memory-bound",)),
}


def card_set() -> CardSet:
    return CardSet(
        name="scripted",
        cards={
            n: ToolCard(name=n, workload=f"{n} kernel", cpu_ms=c, gpu_ms=g, load_ms=ld, vram_mb=v, tags=t)
            for n, (c, g, ld, v, t) in CARDS.items()
        },
    )


def workflow(space: str = "three_way", budget_mb: float | None = 800.0) -> Workflow:
    wf = Workflow.model_validate(
        {
            "name": "scripted",
            "decision_space": space,
            "vram_budget_mb": budget_mb,
            "tasks": {"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"},
            "edges": [],
        }
    )
    return wf.with_cards(card_set())


def mapping(text: str) -> dict[str, Mode]:
    """``"now queue cpu cpu"`` -> {A: gpu_now, B: gpu_queue, C: cpu, D: cpu}."""
    names = {"cpu": Mode.CPU, "now": Mode.GPU_NOW, "gpu": Mode.GPU_NOW, "queue": Mode.GPU_QUEUE}
    return dict(zip(TASKS, (names[w] for w in text.split()), strict=True))


class ScriptedTestbed(Testbed):
    """Deterministic fake. ``slowdown`` multiplies every GPU latency (simulated contention)."""

    name = "scripted"
    deterministic = True

    def __init__(self, slowdown: float = 1.0) -> None:
        self.slowdown = slowdown  # GPU latency multiplier (1: the cards exactly)
        self.calls: list[dict[str, Mode]] = []  # every mapping run, in order

    def latency(self, wf: Workflow, task: str, mode: Mode) -> float:
        c = wf.task_cards[task]
        return c.cpu_ms if mode is Mode.CPU else c.gpu_ms * self.slowdown  # type: ignore[operator]

    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None) -> Execution:
        self.calls.append(dict(mapping))
        cards = workflow.task_cards
        budget = workflow.vram_budget_mb
        spans: list[TaskSpan] = []
        held = 0.0
        for t in workflow.task_ids:
            m = mapping[t]
            if m is Mode.GPU_QUEUE:
                continue
            vram = cards[t].vram_needed_mb if m is Mode.GPU_NOW else 0.0
            if budget is not None and held + vram > budget:
                return Execution(
                    Status.OOM,
                    dict(mapping),
                    None,
                    0.0,
                    held + vram,
                    tuple(spans),
                    message=f"gpu_now task {t} needs {vram:g} MB with {held:g} MB held",
                    testbed=self.name,
                    extra={"failed_task": t},
                )
            held += vram
            spans.append(TaskSpan(t, cards[t].name, m, 0.0, 0.0, self.latency(workflow, t, m), 0.0, vram))
        peak = held
        now = max((s.end_ms for s in spans if s.mode is Mode.GPU_NOW), default=0.0)  # type: ignore[type-var]
        for t in workflow.task_ids:
            if mapping[t] is not Mode.GPU_QUEUE:
                continue
            c = cards[t]
            if budget is not None and c.vram_needed_mb > budget:
                return Execution(
                    Status.OOM,
                    dict(mapping),
                    None,
                    now,
                    c.vram_needed_mb,
                    tuple(spans),
                    message=f"gpu_queue task {t} is larger than the budget",
                    testbed=self.name,
                    extra={"failed_task": t},
                )
            end = now + c.load_needed_ms + self.latency(workflow, t, Mode.GPU_QUEUE)
            spans.append(TaskSpan(t, c.name, Mode.GPU_QUEUE, 0.0, now, end, c.load_needed_ms, c.vram_needed_mb))
            peak = max(peak, c.vram_needed_mb)
            now = end
        e2e = max(s.end_ms for s in spans)  # type: ignore[type-var]
        return Execution(Status.OK, dict(mapping), e2e, e2e, peak, tuple(spans), testbed=self.name)
