"""Search over mappings under an evaluator (the planner's predictor, or the noise-free simulator
for a best-known reference).

* Exhaustive when the space is small: every mapping, host-only tools fixed to the CPU (a GPU
  placement of such a tool is the same run under the start rules).
* Otherwise local search with restarts (large-neighbourhood search): from each heuristic seed,
  first-improvement descent over single-task moves (tasks on the predicted critical path and the
  GPU tasks beside them first, when a ``focus`` function is given), then repeated perturbations of a
  few tasks followed by descent, keeping the best; some kicks move a *group* together (the planner's
  OOM conflicts: the failing task and its holders), a move no single-task descent makes when each
  task alone is no better elsewhere. Bounded by a number of evaluations, so the
  result depends on the seed and the inputs only (never on the machine's speed).

Infeasible mappings (the evaluator returns None: out of VRAM under the start rules) are never
returned as candidates.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentsched.errors import PolicyError
from agentsched.model.workflow import Mode, Workflow

Key = tuple[Mode, ...]
Evaluate = Callable[[Key], float | None]
Focus = Callable[[Key], Sequence[int]]

DEFAULT_EXHAUSTIVE_LIMIT = 4096  # mappings enumerated outright (3^7 = 2187, 2^12 = 4096)
GROUP_KICKS = 0.3  # share of kicks that move a group together when groups are given
MAX_STALE_KICKS = 30  # the local search ends after this many perturbations that found nothing new


SMALL_TASKS = 12  # up to here the search and the value estimate get a generous budget
REPLAN_EVALS = 300  # a later decision's local search around the previous candidates (small workflows)


# Largest workflow the planner takes on. Why: every decision runs a few hundred discrete-event
# predictions of the whole workflow, so a round costs ~tasks x 150 predicted task runs: at 5,000 tasks a
# bench of 20 rounds takes minutes on a small machine, and twice that many tasks takes several times as
# long (docs/results/planner.md). Beyond it the planner is refused in one line, before any run.
MAX_PLAN_TASKS = 5_000


def check_plan_size(workflow: Workflow, who: str = "agent-plan", instead: str = "use agent-rules") -> None:
    """One-line ``PolicyError`` when ``workflow`` has more tasks than the planner takes on."""
    n = len(workflow.tasks)
    if n > MAX_PLAN_TASKS:
        raise PolicyError(f"{who} plans at most {MAX_PLAN_TASKS:,} tasks ({workflow.name} has {n:,}); {instead}")


def eval_budget(n_tasks: int) -> int:
    """Distinct mappings the search may evaluate per decision (sized for < 1 s at 100 tasks, < 10 s at 1,000)."""
    return 3000 if n_tasks <= SMALL_TASKS else max(150, 50000 // n_tasks)


def draws_and_candidates(n_tasks: int) -> tuple[int, int]:
    """Posterior draws and candidates of the value estimate."""
    return (10, 6) if n_tasks <= SMALL_TASKS else (6, 3)


@dataclass(frozen=True, slots=True)
class Candidate:
    key: Key  # modes in task order
    e2e_ms: float  # the evaluator's E2E


@dataclass(frozen=True)
class SearchResult:
    candidates: tuple[Candidate, ...]  # best first, distinct, feasible only
    evaluations: int  # distinct mappings evaluated
    exhaustive: bool  # True when every mapping was evaluated

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def space_size(choices: Sequence[Sequence[Mode]]) -> int:
    return math.prod(len(c) for c in choices)


class _Book:
    """Memoised evaluations and the best distinct candidates seen."""

    def __init__(self, evaluate: Evaluate, max_evals: int) -> None:
        self.evaluate = evaluate
        self.max_evals = max_evals
        self.seen: dict[Key, float | None] = {}

    @property
    def exhausted(self) -> bool:
        return len(self.seen) >= self.max_evals

    def score(self, key: Key) -> float:
        if key not in self.seen:
            self.seen[key] = self.evaluate(key)
        v = self.seen[key]
        return math.inf if v is None else v

    def top(self, k: int) -> tuple[Candidate, ...]:
        ok = [(v, key) for key, v in self.seen.items() if v is not None]
        ok.sort(key=lambda x: (x[0], [m.value for m in x[1]]))
        return tuple(Candidate(key, v) for v, key in ok[:k])


def search(
    evaluate: Evaluate,
    choices: Sequence[Sequence[Mode]],
    seeds: Sequence[Key],
    rng: random.Random,
    *,
    max_evals: int = 2000,
    exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT,
    top: int = 8,
    focus: Focus | None = None,
    groups: Sequence[Sequence[int]] = (),
) -> SearchResult:
    """The ``top`` best feasible mappings found. ``choices[i]``: the modes task i may take; ``groups``:
    task indices some kicks move together."""
    if space_size(choices) <= exhaustive_limit:
        book = _Book(evaluate, math.inf)  # type: ignore[arg-type]
        for key in itertools.product(*choices):
            book.score(key)
        return SearchResult(book.top(top), len(book.seen), True)
    book = _Book(evaluate, min(max_evals, space_size(choices)))
    starts = [_canon(s, choices) for s in seeds] or [tuple(c[0] for c in choices)]
    best_key, best_val = None, math.inf
    for s in dict.fromkeys(starts):  # distinct, in order
        if book.exhausted:
            break
        key, val = _descend(book, s, choices, rng, focus)
        if val < best_val:
            best_key, best_val = key, val
    n = len(choices)
    stale = 0  # kicks in a row that evaluated nothing new (a small space is nearly exhausted)
    while best_key is not None and not book.exhausted and stale < MAX_STALE_KICKS:
        # small kicks, half of them on the critical tasks: large random kicks rarely land near the optimum
        cand = list(best_key)
        if groups and rng.random() < GROUP_KICKS:
            _group_kick(cand, groups[rng.randrange(len(groups))], choices, rng)
        else:
            pool = list(focus(best_key)) if focus is not None and rng.random() < 0.5 else list(range(n))
            for i in rng.sample(pool, min(rng.randint(2, 4), len(pool))):
                cand[i] = rng.choice(choices[i])
        before = len(book.seen)
        key, val = _descend(book, tuple(cand), choices, rng, focus)
        stale = stale + 1 if len(book.seen) == before else 0
        if val < best_val:
            best_key, best_val = key, val
    return SearchResult(book.top(top), len(book.seen), False)


def _group_kick(cand: list[Mode], group: Sequence[int], choices: Sequence[Sequence[Mode]], rng: random.Random) -> None:
    """Move a group together: all of it to one mode where each task may take it (off the GPU most
    often), else each of its tasks to a random mode."""
    common = [m for m in Mode if all(m in choices[i] for i in group)]
    if common and rng.random() < 0.5:
        mode = Mode.CPU if Mode.CPU in common and rng.random() < 0.5 else rng.choice(common)
        for i in group:
            cand[i] = mode
    else:
        for i in group:
            cand[i] = rng.choice(choices[i])


def _canon(key: Key, choices: Sequence[Sequence[Mode]]) -> Key:
    return tuple(m if m in c else c[0] for m, c in zip(key, choices, strict=True))


def _descend(
    book: _Book, key: Key, choices: Sequence[Sequence[Mode]], rng: random.Random, focus: Focus | None
) -> tuple[Key, float]:
    """First-improvement descent over single-task moves until no move improves or the budget ends."""
    val = book.score(key)
    n = len(choices)
    while not book.exhausted:
        order = list(focus(key)) if focus is not None else []
        focused = set(order)  # once per pass: a set per index would be quadratic in the tasks
        rest = [i for i in range(n) if i not in focused]
        rng.shuffle(order)
        rng.shuffle(rest)
        improved = False
        for i in order + rest:
            for m in choices[i]:
                if m is key[i]:
                    continue
                cand = key[:i] + (m,) + key[i + 1 :]
                v = book.score(cand)
                if v < val - 1e-9:
                    key, val, improved = cand, v, True
                    break
                if book.exhausted:
                    return key, val
            if improved:
                break
        if not improved:
            break
    return key, val


def rescore(keys: Sequence[Key], evaluate: Evaluate, top: int, evaluations: int | None = None) -> SearchResult:
    """The ``top`` best of ``keys`` (distinct) under ``judge``, as a search result."""
    keys = list(dict.fromkeys(keys))
    scored = sorted((v, [m.value for m in k], k) for k in keys if (v := evaluate(k)) is not None)
    return SearchResult(
        tuple(Candidate(k, v) for v, _, k in scored[:top]), len(keys) if evaluations is None else evaluations, False
    )
