"""A best-known reference for workflows too large to enumerate: a long local search (the planner's
``search``) over the testbed's noise-free execution, seeded by HEFT, all-CPU and each task on its
faster isolated device, optionally with extra mappings (e.g. every mapping some policy ran) so the
reference is the best E2E known from any source. Reports show E2E over this where there is no oracle.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentsched.errors import AgentschedError
from agentsched.model.workflow import DecisionSpace, Mode, Workflow
from agentsched.planner.search import search
from agentsched.policies.heft import HeftPolicy
from agentsched.testbeds.base import Testbed

DEFAULT_BEST_KNOWN_EVALS = 3000


@dataclass(frozen=True)
class BestKnown:
    """The best mapping known and its noise-free E2E."""

    mapping: dict[str, Mode]
    e2e_ms: float
    evaluations: int  # noise-free executions spent
    source: str  # "local search" or "given mapping"


def noise_free_e2e(workflow: Workflow, testbed: Testbed, mapping: Mapping[str, Mode]) -> float | None:
    """E2E of the testbed's noise-free execution (None: infeasible); one-line error without one."""
    x = testbed.expected(workflow, dict(mapping))
    if x is None:
        raise AgentschedError(f"testbed {testbed.name} has no noise-free execution: no best-known reference")
    return x.e2e_ms if x.ok else None


def best_known(
    workflow: Workflow,
    testbed: Testbed,
    *,
    seed: int = 0,
    max_evals: int = DEFAULT_BEST_KNOWN_EVALS,
    extra: Iterable[Mapping[str, Mode]] = (),
) -> BestKnown:
    """Local search on the noise-free testbed from heuristic seeds, and the best of ``extra``."""
    ids = workflow.task_ids
    cards = workflow.task_cards
    modes = workflow.decision_space.modes
    choices = [modes if cards[t].has_gpu else (Mode.CPU,) for t in ids]
    faster = {t: cards[t].gpu_ms is not None and cards[t].gpu_ms < cards[t].cpu_ms for t in ids}
    seeds = [
        tuple(p.mode for p in (HeftPolicy().schedule(workflow, cards)[t] for t in ids)),
        tuple(Mode.CPU for _ in ids),
        tuple(Mode.GPU_NOW if faster[t] else Mode.CPU for t in ids),
    ]
    if workflow.decision_space is DecisionSpace.THREE_WAY:
        seeds.append(tuple(Mode.GPU_QUEUE if faster[t] else Mode.CPU for t in ids))

    def evaluate(key: tuple[Mode, ...]) -> float | None:
        return noise_free_e2e(workflow, testbed, dict(zip(ids, key, strict=True)))

    res = search(
        evaluate, choices, seeds, random.Random(f"best-known:{workflow.name}:{seed}"), max_evals=max_evals, top=1
    )
    best = (
        BestKnown(dict(zip(ids, res.best.key, strict=True)), res.best.e2e_ms, res.evaluations, "local search")
        if res.best is not None
        else None
    )
    for m in extra:
        e = noise_free_e2e(workflow, testbed, m)
        if e is not None and (best is None or e < best.e2e_ms - 1e-9):
            best = BestKnown(dict(m), e, (best.evaluations if best else 0), "given mapping")
    if best is None:
        raise AgentschedError(f"no best-known reference for {workflow.name}: no feasible mapping found")
    return best
