"""The deterministic reasoner: the written rules of the prompt, applied the way a careful reader
would. It reads the same four streams as the LLM (``AgentView``) and nothing else; it never
enumerates mappings or predicts E2E with a model. docs/agent.md lists the rules.

Round 0
  * warm start, binary space: the ratio guideline (ratio = cpu_ms / gpu_ms): no GPU implementation
    or ratio < 1 -> cpu; ratio >= 7 -> gpu; 1 <= ratio < 7 is ambiguous: cpu only if its cpu_ms
    stays within the longest task it runs beside (so the offload costs no time and relieves the GPU).
  * warm start, three-way space: structural rules. gpu_now goes, while the VRAM budget holds for
    tasks that can overlap, to the tasks that lose most per MB without it (loss = what the cheaper
    of cpu and gpu_queue costs over gpu_now). The others go to gpu_queue if their place in the
    serial queue (every earlier queued task's load + run, then their own) still ends before their
    cpu_ms, else to cpu.
  * cold start: semantic tags. compute-bound -> gpu (gpu_now); memory-bound, compute-light,
    io-bound, cpu-bound, no-gpu or untagged -> cpu.

Later rounds, first rule that applies:
  1. last round of the run: the best-ever mapping (nothing left to learn from);
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
from agentsched.model.workflow import DecisionSpace, Mode, fits_vram

GPU_TAGS = frozenset({"compute-bound"})  # cold start: tags of dense kernels a GPU accelerates
RATIO_GPU = 7.0  # ratio at and above which a task stays on the GPU
RATIO_CPU = 1.0  # ratio below which the CPU is faster even in isolation


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
            return Decision({t: Mode.GPU_NOW for t in view.workflow.task_ids},
                            "round 0 without a prior: every task on gpu_now (the framework default)")
        if not view.warm:
            return self._tags(view)
        if view.workflow.decision_space is DecisionSpace.BINARY:
            return self._ratio(view)
        return self._structural(view)

    def _tags(self, view: AgentView) -> Decision:
        m = {t: (Mode.GPU_NOW if GPU_TAGS & set(view.tools[t].tags) else Mode.CPU) for t in view.workflow.task_ids}
        return Decision(m, "round 0, cold start: compute-bound tags on the GPU, every other tag on the CPU")

    def _ratio(self, view: AgentView) -> Decision:
        ids = view.workflow.task_ids
        cards = _cards(view)
        m, capable = _cpu_only(view)
        ambiguous = []
        for t in capable:
            if cards[t].speedup >= RATIO_GPU:  # type: ignore[operator]
                m[t] = Mode.GPU_NOW
            else:
                ambiguous.append(t)
        def time_ms(u: str) -> float:
            cu = cards[u]
            on_cpu = m.get(u, Mode.GPU_NOW) is Mode.CPU or not cu.has_gpu
            return cu.cpu_ms if on_cpu else cu.gpu_ms  # type: ignore[return-value]

        times = {u: time_ms(u) for u in ids}  # kept current as tasks are decided: one lookup per pair
        for t in ambiguous:
            c = cards[t]
            bottleneck = max((times[u] for u in view.concurrent[t]), default=0.0)
            m[t] = Mode.CPU if c.cpu_ms <= bottleneck else Mode.GPU_NOW
            times[t] = time_ms(t)
        return Decision({t: m[t] for t in ids}, "round 0, warm start: ratio guideline (cpu_ms/gpu_ms)")

    def _structural(self, view: AgentView) -> Decision:
        wf = view.workflow
        ids = wf.task_ids
        cards = _cards(view)
        budget = wf.vram_budget_mb
        m, gpu_capable = _cpu_only(view)

        def loss(t: str) -> float:
            c = cards[t]
            assert c is not None and c.gpu_ms is not None
            return min(c.cpu_ms, c.gpu_ms + c.load_needed_ms) - c.gpu_ms

        def density(t: str) -> float:
            v = cards[t].vram_needed_mb  # type: ignore[union-attr]
            return loss(t) / v if v > 0 else float("inf")

        now: list[str] = []
        for t in sorted(gpu_capable, key=lambda u: (-density(u), ids.index(u))):
            if budget is None or _fits(view, now + [t], budget):
                now.append(t)
        queue_end_ms = 0.0
        for t in ids:
            if t in m:
                continue
            c = cards[t]
            assert c is not None and c.gpu_ms is not None
            if t in now:
                m[t] = Mode.GPU_NOW
                continue
            finish = queue_end_ms + c.load_needed_ms + c.gpu_ms
            if finish < c.cpu_ms and (budget is None or c.vram_needed_mb <= budget):
                m[t] = Mode.GPU_QUEUE
                queue_end_ms = finish
            else:
                m[t] = Mode.CPU
        return Decision({t: m[t] for t in ids},
                        "round 0, warm start: structural rules (VRAM budget, queue load cost, queue timeline)")

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
        if best is not None and view.round >= view.rounds - 1:
            return Decision(dict(best.mapping), f"last round: keep the best mapping ({best.e2e_ms:.0f} ms)")
        if best is None:
            return self._recover(view)
        # 3. adopt a measured what-if that beats the best by more than the stability threshold
        bar = best.e2e_ms * (1 - view.stability)
        cands = [m for m in view.measured if not m.was_round and m.mean_e2e_ms is not None and m.mean_e2e_ms < bar]
        if cands:
            pick = min(cands, key=lambda m: (m.mean_e2e_ms, _order_key(view, m.mapping)))
            return Decision(dict(pick.mapping),
                            f"adopt a what-if: {pick.mean_e2e_ms:.0f} ms beats the best {best.e2e_ms:.0f} ms "
                            f"by more than {view.stability:.0%}")
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
            return Decision(dict(pick.mapping), f"no feasible round yet: take the best feasible what-if "
                                                f"({pick.mean_e2e_ms:.0f} ms)")
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
        return Decision(m, f"round {last.round} was infeasible: move {culprit}, whose start broke the budget, "
                           f"to {view.workflow.decision_space.label(m[culprit])}")

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
            victim = (min(enough, key=lambda u: (sizes[u], u)) if enough
                      else max(held, key=lambda u: (sizes[u], u)))
            m[victim] = demote


def _cards(view: AgentView) -> dict[str, ToolCard]:
    """The warm-start cards by task (round-0 rules that need figures run in warm start only)."""
    out = {}
    for t in view.workflow.task_ids:
        c = view.tools[t].card
        assert c is not None, "the ratio and structural rules need cards (warm start)"
        out[t] = c
    return out


def _cpu_only(view: AgentView) -> tuple[MappingT, list[str]]:
    """Tasks the CPU wins outright (no GPU implementation, or ratio < 1) -> cpu; the rest, in order."""
    cards = _cards(view)
    m: MappingT = {}
    capable = []
    for t in view.workflow.task_ids:
        c = cards[t]
        if not c.has_gpu or (c.speedup or 0.0) < RATIO_CPU:
            m[t] = Mode.CPU
        else:
            capable.append(t)
    return m, capable


def _fits(view: AgentView, now: list[str], budget: float) -> bool:
    """VRAM of every gpu_now task plus the gpu_now tasks that can overlap it stays in the budget."""
    for t in now:
        beside = sum(view.vram_mb(u) or 0.0 for u in now if u in view.concurrent[t])
        if not fits_vram(beside, view.vram_mb(t) or 0.0, budget):
            return False
    return True


def _order_key(view: AgentView, mapping: MappingT) -> tuple[int, ...]:
    """Deterministic tie-break: task order, then mode order of the decision space."""
    modes = view.workflow.decision_space.modes
    return tuple(modes.index(mapping[t]) for t in view.workflow.task_ids)
