"""The deterministic reasoner: the written rules of the prompt, applied the way a careful reader
would. It reads the same four streams as the LLM (``AgentView``) and nothing else; it never
enumerates mappings or predicts E2E with a model. docs/agent.md lists the rules.

Round 0: ``planner/initial.py`` (the ratio guideline, the structural rules, the tags), shared with the
planner's search seeds.

Later rounds, first rule that applies:
  1. last round of the run: the best-ever mapping (nothing left to learn from);
  1b. the last round had nothing to judge (every run failed in host code: ``RoundResult.judged``):
     its mapping again, unchanged (the failure says nothing of where the tasks ran);
  2. no feasible round yet: the best feasible what-if; else repair the failed start (the task that
     broke the budget goes to gpu_queue when it fits the budget alone, else to cpu);
  3. a measured what-if or swap, never run as a round, whose mean E2E beats the best by more than
     the stability threshold: the best such one;
  4. an exploration hint not followed yet: the best mapping with the hinted placement, making room
     under the budget by sending overlapping gpu_now tasks to gpu_queue (three-way) or cpu;
  5. otherwise the best-ever mapping.
"""

from __future__ import annotations

from agentsched.agent.reasoner import Decision, Reasoner
from agentsched.agent.view import AgentView, MappingT
from agentsched.model.cards import ToolCard
from agentsched.model.workflow import DecisionSpace, Mode
from agentsched.planner.initial import card_mapping, tag_mapping

__all__ = ["Decision", "RulesReasoner"]


class RulesReasoner(Reasoner):
    """Deterministic reasoner over the four streams; always decides."""

    name = "rules"

    def __init__(self, initial: str = "rules") -> None:
        self.initial_rule = initial  # "rules", or "all-gpu": no prior (every task on gpu_now), for ablations
        self._followed: set[tuple[str, Mode]] = set()  # hinted placements already tried

    def reset(self) -> None:
        """A new run: no hint followed yet."""
        self._followed = set()

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "initial": self.initial_rule}

    # ---- round 0 -----------------------------------------------------------------------------
    def initial(self, view: AgentView) -> Decision:
        if self.initial_rule == "all-gpu":
            return Decision(
                {t: Mode.GPU_NOW for t in view.workflow.task_ids},
                "round 0 without a prior: every task on gpu_now (the framework default)",
            )
        if not view.warm:
            return Decision(*tag_mapping(view.workflow, {t: tuple(v.tags) for t, v in view.tools.items()}))
        return Decision(*card_mapping(view.workflow, _cards(view)))

    # ---- later rounds ------------------------------------------------------------------------
    def propose(self, view: AgentView) -> Decision:
        """The first rule that applies (module docstring); the audit names the reasoner and the rule."""
        d = self._decide(view)
        # no prompt: the rules read the streams directly; "response" is the rule that decided
        return Decision(d.mapping, d.reason, {"reasoner": self.name, "response": d.reason})

    def _decide(self, view: AgentView) -> Decision:
        if view.round == 0 or not view.history:
            return self.initial(view)
        best = view.best
        if best is not None and view.rounds is not None and view.round >= view.rounds - 1:
            return Decision(dict(best.mapping), f"last round: keep the best mapping ({best.e2e_ms:.0f} ms)")
        last = view.history[-1]
        if not last.judged:
            return Decision(
                dict(last.mapping),
                f"round {last.round} had nothing to judge (every run failed in "
                f"host code, not the mapping's doing): run its mapping again",
            )
        if best is None:
            return self._recover(view)
        # 3. adopt a measured what-if that beats the best by more than the stability threshold
        bar = best.e2e_ms * (1 - view.stability)
        cands = [m for m in view.measured if not m.was_round and m.mean_e2e_ms is not None and m.mean_e2e_ms < bar]
        if cands:
            pick = min(cands, key=lambda m: (m.mean_e2e_ms, _order_key(view, m.mapping)))
            return Decision(
                dict(pick.mapping),
                f"adopt a what-if: {pick.mean_e2e_ms:.0f} ms beats the best {best.e2e_ms:.0f} ms "
                f"by more than {view.stability:.0%}",
            )
        # 4. follow an exploration hint
        for h in view.hints:
            if (h.task, h.mode) in self._followed:
                continue
            self._followed.add((h.task, h.mode))
            m = self._make_room(view, best.mapping, h.task, h.mode)
            if m != best.mapping and not view.known_infeasible(m) and not view.was_round(m):
                return Decision(m, f"follow the hint: try {h.task} on {view.workflow.decision_space.label(h.mode)}")
        return Decision(dict(best.mapping), f"keep the best mapping ({best.e2e_ms:.0f} ms)")

    def _recover(self, view: AgentView) -> Decision:
        feasible = [m for m in view.measured if m.mean_e2e_ms is not None]
        if feasible:
            pick = min(feasible, key=lambda m: (m.mean_e2e_ms, _order_key(view, m.mapping)))
            return Decision(
                dict(pick.mapping), f"no feasible round yet: take the best feasible what-if ({pick.mean_e2e_ms:.0f} ms)"
            )
        last = view.history[-1]
        m = dict(last.mapping)
        culprit = last.failed_task
        if culprit is None or m[culprit] is Mode.CPU:
            gpu = [t for t in view.workflow.task_ids if m[t] is not Mode.CPU]
            if not gpu:
                return Decision(m, "no feasible round yet and nothing left on the GPU")
            culprit = max(gpu, key=lambda t: (view.vram_mb(t) or 0.0, -view.workflow.task_index[t]))
        need = view.vram_mb(culprit)
        budget = view.workflow.vram_budget_mb
        three_way = view.workflow.decision_space is DecisionSpace.THREE_WAY
        if three_way and m[culprit] is Mode.GPU_NOW and (budget is None or need is None or need <= budget):
            m[culprit] = Mode.GPU_QUEUE
        else:
            m[culprit] = Mode.CPU
        return Decision(
            m,
            f"round {last.round} was infeasible: move {culprit}, whose start broke the budget, "
            f"to {view.workflow.decision_space.label(m[culprit])}",
        )

    def _make_room(self, view: AgentView, base: MappingT, task: str, mode: Mode) -> MappingT:
        m = {**base, task: mode}
        budget = view.workflow.vram_budget_mb
        if mode is not Mode.GPU_NOW or budget is None:
            return m
        demote = Mode.GPU_QUEUE if view.workflow.decision_space is DecisionSpace.THREE_WAY else Mode.CPU
        while True:
            held = [u for u in view.concurrent[task] if m[u] is Mode.GPU_NOW]
            sizes = {u: view.vram_mb(u) for u in held}
            need = view.vram_mb(task)
            if need is None or any(v is None for v in sizes.values()):
                return m  # unknown sizes (cold start): try it and let the monitor measure
            over = need + sum(sizes.values()) - budget  # type: ignore[arg-type]
            if over <= 0 or not held:
                return m
            # the smallest task that alone makes room, else the largest, and repeat
            enough = [u for u in held if sizes[u] >= over]  # type: ignore[operator]
            victim = min(enough, key=lambda u: (sizes[u], u)) if enough else max(held, key=lambda u: (sizes[u], u))
            m[victim] = demote


def _cards(view: AgentView) -> dict[str, ToolCard]:
    """The warm-start cards by task (round-0 rules that need figures run in warm start only)."""
    out = {}
    for t in view.workflow.task_ids:
        c = view.tools[t].card
        assert c is not None, "the ratio and structural rules need cards (warm start)"
        out[t] = c
    return out


def _order_key(view: AgentView, mapping: MappingT) -> tuple[int, ...]:
    """Deterministic tie-break: task order, then mode order of the decision space."""
    modes = view.workflow.decision_space.modes
    return tuple(modes.index(mapping[t]) for t in view.workflow.task_ids)
