"""The runtime monitor (paper section 3.2, Algorithm 1): turns the consequences of a mapping into
evidence. It never computes or recommends a mapping.

Per round it receives the round's result and updates its state:

* history of rounds (feasibility, peak VRAM) and the best-ever feasible mapping;
* a sliding window of run latencies per (task, mode) -> running averages (Factor A: measured,
  contention-corrected figures in place of the isolated cards); unobserved (task, mode) pairs;
* when the mapping changed: single-tool reprobes (each task moved to each other mode, the rest
  fixed), executed on the testbed; when a reprobe to ``gpu_now`` is infeasible around a feasible
  mapping, swap reprobes (the blocked task to ``gpu_now``, one current ``gpu_now`` task to
  ``gpu_queue``);
* when the scheduler repeats a stagnant mapping: exploration hints naming placements never seen in
  a feasible run (a hint names a task and a mode, never a mapping), and re-measurements of what-ifs
  that came close to the best (one probe is noisy).

Progressive activation: history always; running averages once contention (Factor A) is detected;
reprobes once either factor is detected (the paper's Figure 4 shows what-ifs in a binary scenario
with contention only), and from the start in cold start (no card says what a placement costs);
swaps and hints once memory pressure (Factor B) is detected. Every probe is
one real execution through the injected ``probe`` callable (the runner counts it) and probes have a
budget.
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace

from agentsched.model.cards import ToolCard
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import MappingT, mapping_key
from agentsched.model.rounds import RoundResult, first_cause, speaks
from agentsched.model.workflow import DecisionSpace, Mode, Workflow, effective_mode, task_modes
from agentsched.monitor.config import MonitorConfig
from agentsched.monitor.measured import Measured
from agentsched.monitor.overlap import overlapping
from agentsched.monitor.records import BestMapping, Evidence, Hint, HistoryEntry, LatencyAverage, WhatIf
from agentsched.monitor.render import summary_lines

ProbeFn = Callable[[MappingT], Execution]
Key = tuple[Mode, ...]


HISTORY_ROUNDS = 64  # rounds the monitor (and so the agent's view and prompt) keeps; totals cover all


class RuntimeMonitor:
    """Algorithm 1. ``cards`` are the isolated profiles in warm start, None in cold start."""

    def __init__(
        self,
        workflow: Workflow,
        probe: ProbeFn,
        config: MonitorConfig | None = None,
        *,
        cards: Mapping[str, ToolCard] | None = None,
        probe_allowed: Callable[[], bool] | None = None,
    ) -> None:
        self.workflow = workflow
        # an outside exploration budget (the runtime's share of live invocations); None: none
        self.probe_allowed = probe_allowed
        self.probe_fn = probe  # one counted testbed execution (the runner's ctx.probe)
        self.config = config or MonitorConfig()
        self.cards = dict(cards) if cards is not None else None  # task -> isolated card; None: cold start
        self.space: DecisionSpace = workflow.decision_space
        self.budget_mb = workflow.vram_budget_mb
        self.history: deque[HistoryEntry] = deque(maxlen=HISTORY_ROUNDS)  # the last rounds observed, in order
        self._measured: dict[Key, Measured] = {}  # every mapping executed (rounds and probes)
        self._windows: dict[tuple[str, Mode], deque[float]] = {}  # (task, mode) -> recent run latencies
        self._observed_ok: set[tuple[str, Mode]] = set()  # (task, mode) seen finishing in a feasible run
        self.observed_vram_mb: dict[str, float] = {}  # task -> VRAM seen held on the GPU
        self.contention = False  # Factor A detected (sticky)
        self.memory_pressure = False  # Factor B detected (sticky)
        self.probes_total = 0  # probe executions in this run
        self._round_probes = 0  # probe executions after the current round
        self._notes: list[str] = []  # remarks of the current round
        self._around: dict[Key, list[WhatIf]] = {}  # the reprobes and swaps last reported around each mapping
        self._refused = False  # probe_allowed said no during the current round's probes
        self._deferred: Key | None = None  # mapping whose reprobes the exploration budget cut short
        if self.cards is not None and self.budget_mb is not None:
            # warm start: the cards already say whether everything can sit on the GPU at once
            total = sum(c.vram_needed_mb for c in self.cards.values())
            if total > self.budget_mb:
                self.memory_pressure = True

    # ---- structure --------------------------------------------------------------------------
    @property
    def concurrent(self) -> Mapping[str, frozenset[str]]:
        """Tasks that may run at the same time as each task (the workflow's overlap sets)."""
        return self.workflow.concurrent

    def label(self, mode: Mode) -> str:
        return self.space.label(mode)

    def known_vram_mb(self, task: str) -> float | None:
        """VRAM a task holds on the GPU: the card in warm start, else what was observed."""
        if self.cards is not None:
            return self.cards[task].vram_needed_mb
        return self.observed_vram_mb.get(task)

    # ---- queries the reasoners use -----------------------------------------------------------
    def measured(self, mapping: Mapping[str, Mode]) -> Measured | None:
        return self._measured.get(mapping_key(self.workflow, mapping))

    def measured_mappings(self) -> list[tuple[MappingT, float | None, int, bool]]:
        """(mapping, mean E2E or None, feasible samples, was run as a round) for everything measured.
        A mapping whose every run failed in host code (probes) is left out: nothing was measured of it,
        and a mean of None would read as infeasible."""
        return [
            (dict(m.mapping), m.mean_ms, m.samples, m.first_round is not None)
            for m in self._measured.values()
            if m.samples or m.infeasible
        ]

    def best(self) -> BestMapping | None:
        cands = [m for m in self._measured.values() if m.first_round is not None and m.mean_ms is not None]
        if not cands:
            return None
        b = min(cands, key=lambda m: (m.mean_ms, m.first_round))
        return BestMapping(dict(b.mapping), b.mean_ms, b.samples, b.first_round)  # type: ignore[arg-type]

    def averages(self) -> list[LatencyAverage]:
        out = []
        for t in self.workflow.task_ids:
            for mode in self._modes(t):
                w = self._windows.get((t, mode))
                if not w:
                    continue
                card_ms = None
                if self.cards is not None:
                    c = self.cards[t]
                    card_ms = c.cpu_ms if effective_mode(c, mode) is Mode.CPU else c.gpu_ms
                out.append(LatencyAverage(t, self._tool(t), mode, statistics.fmean(w), len(w), card_ms))
        return out

    def unobserved(self) -> list[tuple[str, Mode]]:
        return [(t, m) for t in self.workflow.task_ids for m in self._modes(t) if (t, m) not in self._observed_ok]

    def _modes(self, task: str) -> tuple[Mode, ...]:
        """Where ``task`` may be placed (a tool without a GPU implementation: cpu alone)."""
        return task_modes(self.space, self.workflow.task_cards[task])

    def _tool(self, task: str) -> str:
        return self.workflow.task_cards[task].name if self.cards is not None else self.workflow.tasks[task].tool_label

    # ---- recording ---------------------------------------------------------------------------
    def _record_execution(self, x: Execution, round_index: int | None, against: bool | None = None) -> None:
        key = mapping_key(self.workflow, x.mapping)
        m = self._measured.get(key)
        if m is None:
            m = self._measured[key] = Measured(dict(x.mapping))
        if round_index is not None and m.first_round is None:
            m.first_round = round_index
        m.peak_vram_mb = max(m.peak_vram_mb, x.peak_vram_mb)
        if x.ok and x.e2e_ms is not None:
            m.add(x.e2e_ms)
        elif speaks(x, (x,), m.samples > 0) if against is None else against:  # a probe; RoundResult.counts_against
            m.infeasible = True
            m.message = x.message
            if x.status is Status.OOM and self.budget_mb is not None:
                self.memory_pressure = True
        if self.budget_mb is not None and x.peak_vram_mb >= self.config.pressure_fraction * self.budget_mb:
            self.memory_pressure = True
        gpu_spans = []
        for s in x.spans:
            if s.end_ms is None:
                continue
            if s.mode is not Mode.CPU and s.vram_mb > 0:
                self.observed_vram_mb[s.task] = max(self.observed_vram_mb.get(s.task, 0.0), s.vram_mb)
                gpu_spans.append(s)
            if x.ok:
                self._observed_ok.add((s.task, s.mode))
            run = s.run_ms
            if run is not None:
                w = self._windows.setdefault((s.task, s.mode), deque(maxlen=self.config.window))
                w.append(run)
        if not self.contention and x.ok:
            self.contention = self._contended(gpu_spans)

    def _contended(self, gpu_spans: list) -> bool:
        """Factor A: GPU tasks overlapped and (warm start) ran measurably slower than their cards."""
        overlapped = overlapping(gpu_spans)
        if not overlapped:
            return False
        if self.cards is None:
            return True  # cold start: no isolated figure to compare with; overlap is the signal
        for s in overlapped:
            card = self.cards[s.task]
            if card.gpu_ms and s.run_ms is not None and s.run_ms > card.gpu_ms * (1 + self.config.contention_slowdown):
                return True
        return False

    # ---- probes ------------------------------------------------------------------------------
    def _budget_left(self) -> bool:
        c = self.config
        if c.probe_budget is not None and self.probes_total >= c.probe_budget:
            self._note("probe budget exhausted")
            return False
        if c.max_probes_per_round is not None and self._round_probes >= c.max_probes_per_round:
            self._note("per-round probe limit reached")
            return False
        if self.probe_allowed is not None and not self.probe_allowed():
            self._note("exploration budget exhausted")
            self._refused = True
            return False
        return True

    def _note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    def _whatif(
        self,
        kind: str,
        label: str,
        task: str,
        mode: Mode,
        swapped: str | None,
        mapping: MappingT,
        *,
        fresh: bool = False,
    ) -> WhatIf | None:
        """Measure ``mapping`` (or answer from an earlier run unless ``fresh``); None when out of budget."""
        known = self.measured(mapping)
        if known is not None and (known.samples or known.infeasible) and not fresh:
            last = known.last_ms if known.samples and not known.infeasible else None
            return WhatIf(
                kind,
                label,
                task,
                mode,
                swapped,
                dict(mapping),
                Status.OOM if known.infeasible else Status.OK,
                last,
                known.mean_ms,
                known.samples,
                known.peak_vram_mb,
                known.message,
                executed=False,
            )
        if not self._budget_left():
            return None
        x = self.probe_fn(dict(mapping))
        self.probes_total += 1
        self._round_probes += 1
        self._record_execution(x, None)
        m = self.measured(mapping)
        assert m is not None
        return WhatIf(
            kind,
            label,
            task,
            mode,
            swapped,
            dict(mapping),
            x.status,
            x.e2e_ms if x.ok else None,
            m.mean_ms,
            m.samples,
            x.peak_vram_mb,
            x.message,
            executed=True,
        )

    def _reprobes(self, base: MappingT, base_ok: bool) -> list[WhatIf]:
        c = self.config
        out: list[WhatIf] = []
        blocked: list[str] = []
        for t in self.workflow.task_ids:
            for mode in self._modes(t):
                cur = base[t]
                if mode is cur:
                    continue
                if cur is Mode.CPU and mode is Mode.GPU_QUEUE and not c.cpu_to_queue_reprobe:
                    continue
                w = self._whatif("reprobe", f"{t}->{self.label(mode)}", t, mode, None, {**base, t: mode})
                if w is None:
                    return out
                out.append(w)
                if mode is Mode.GPU_NOW and not w.ok and w.status is Status.OOM:
                    blocked.append(t)
        if self._swaps_active() and base_ok:
            for t in blocked:
                for u in self.workflow.task_ids:
                    if u == t or base[u] is not Mode.GPU_NOW:
                        continue
                    w = self._whatif(
                        "swap", f"SWAP {t}<->{u}", t, Mode.GPU_NOW, u, {**base, t: Mode.GPU_NOW, u: Mode.GPU_QUEUE}
                    )
                    if w is None:
                        return out
                    out.append(w)
        return out

    def _confirm(self, base: MappingT, best: BestMapping | None) -> list[WhatIf]:
        """Re-measure the what-ifs around a stagnant mapping whose mean came close to the best
        (within ``confirm_margin``, the closest ``confirm_top`` first): one probe is noisy, and a
        real gain just above the stability threshold can read as none."""
        if best is None:
            return []
        c = self.config
        close = []
        for w in self._around.get(mapping_key(self.workflow, base), []):
            m = self.measured(w.mapping)
            if m is None or m.first_round is not None or m.mean_ms is None or m.samples >= c.confirm_samples:
                continue
            if m.mean_ms <= best.e2e_ms * (1 + c.confirm_margin):
                close.append((m.mean_ms, w))
        close.sort(key=lambda p: p[0])
        out = []
        for _, w in close[: c.confirm_top]:
            m = self.measured(w.mapping)
            assert m is not None
            while m.samples < c.confirm_samples and not m.infeasible:
                x = self._whatif("confirm", w.label, w.task, w.mode, w.swapped, w.mapping, fresh=True)
                if x is None:
                    return out
                out.append(x)
        return out

    # ---- activation --------------------------------------------------------------------------
    def _averages_active(self) -> bool:
        return self.config.running_averages and (self.contention or not self.config.progressive)

    def _reprobes_active(self) -> bool:
        # cold start has no card to trust even without a factor: measuring is the only evidence
        cold = self.cards is None
        return self.config.reprobe and (self.contention or self.memory_pressure or cold or not self.config.progressive)

    def _swaps_active(self) -> bool:
        return (
            self.config.swap_reprobe
            and self.space is DecisionSpace.THREE_WAY
            and (self.memory_pressure or not self.config.progressive)
        )

    def _hints_active(self) -> bool:
        return self.config.hints and (self.memory_pressure or not self.config.progressive)

    # ---- Algorithm 1 -------------------------------------------------------------------------
    def observe(self, result: RoundResult) -> Evidence:
        """Record a round and, as the active mechanisms say, probe and hint. Returns its evidence."""
        self._round_probes = 0
        self._notes = []
        self._refused = False
        cause = first_cause(result.executions) if result.judged else None
        failed = cause.extra.get("failed_task") if cause is not None else None  # the run the verdict is of
        if failed not in self.workflow.task_index:  # e.g. a LangGraph host node: not a task to move
            failed = None
        entry = HistoryEntry(
            result.round,
            dict(result.mapping),
            result.status,
            result.e2e_ms,
            result.peak_vram_mb,
            result.message,
            failed,
            result.judged,
        )
        prev = next((h.mapping for h in reversed(self.history) if h.judged), None)  # the last round judged
        self.history.append(entry)
        had = (self.contention, self.memory_pressure)
        if not result.judged:  # its runs teach nothing: no verdict, timings or VRAM from them
            self._note(f"R{result.round} had nothing to judge: every run failed in host code, not the mapping's doing")
        for x in result.executions if result.judged else ():
            self._record_execution(x, result.round, result.counts_against(x))
        active = ["history"]
        whatifs: list[WhatIf] = []
        hints: list[Hint] = []
        # nothing to judge: no probe or hint either (they would fail in the same host code); the
        # rerun that follows, judged, probes around the mapping as if this round had not been
        if self.config.enabled and result.judged:
            whatifs, hints = self._mechanisms(entry, prev, had, active)
        best = self.best()
        averages = self.averages() if self.config.enabled and self._averages_active() else []
        unobserved = self.unobserved() if self.config.enabled else []
        ev = Evidence(
            round=result.round,
            contention=self.contention,
            memory_pressure=self.memory_pressure,
            active=tuple(active),
            entry=entry,
            best=best,
            averages=tuple(averages),
            unobserved=tuple(unobserved),
            whatifs=tuple(whatifs),
            hints=tuple(hints),
            observed_vram_mb=dict(self.observed_vram_mb),
            probes=self._round_probes,
            probes_total=self.probes_total,
            notes=tuple(self._notes),
            summary=(),
        )
        return replace(ev, summary=tuple(self.summarize(ev)))

    def _mechanisms(
        self, entry: HistoryEntry, prev: MappingT | None, had: tuple[bool, bool], active: list[str]
    ) -> tuple[list[WhatIf], list[Hint]]:
        """A judged round's what-ifs and hints, from the mechanisms active now; appends their names to
        ``active`` and notes a factor detected for the first time."""
        whatifs: list[WhatIf] = []
        hints: list[Hint] = []
        changed = prev is None or prev != entry.mapping
        stagnant = self._stagnant()
        key = mapping_key(self.workflow, entry.mapping)
        if self._reprobes_active():
            # an exploration budget (probe_allowed) that cut a mapping's reprobes short: they
            # resume in its next rounds, measured ones answered from memory
            resume = not changed and self._deferred == key
            if changed or resume:
                active.append("reprobes")
                whatifs = self._reprobes(entry.mapping, entry.ok)
                self._around[key] = whatifs
                self._deferred = key if self._refused else None
                if any(w.kind == "swap" for w in whatifs):
                    active.append("swaps")
            elif stagnant and self.config.confirm:
                whatifs = self._confirm(entry.mapping, self.best())
                if whatifs:
                    active.append("confirm")
        if self._hints_active() and stagnant:
            hints = self._hints()
            if hints:
                active.append("hints")
        if self._averages_active():
            active.insert(1, "running_averages")
        if not had[0] and self.contention:
            self._note("contention detected (Factor A)")
        if not had[1] and self.memory_pressure:
            self._note("memory pressure detected (Factor B)")
        return whatifs, hints

    def _stagnant(self) -> bool:
        n = self.config.stagnation_rounds
        judged = [h for h in self.history if h.judged]  # a round with nothing to judge is no repeat
        if len(judged) < n:
            return False
        last = judged[-1].mapping
        return all(h.mapping == last for h in itertools.islice(reversed(judged), n))

    def _hints(self) -> list[Hint]:
        """Placements never seen in a feasible run that could still fit the budget."""
        best = self.best()
        base = best.mapping if best is not None else self.history[-1].mapping
        rounds_same = 0
        for h in reversed(self.history):
            if h.mapping != self.history[-1].mapping:
                break
            rounds_same += 1
        out = []
        for t, mode in self.unobserved():
            if base[t] is mode:
                continue
            need = self.known_vram_mb(t) if mode is not Mode.CPU else 0.0
            if mode is not Mode.CPU and need is not None and self.budget_mb is not None and need > self.budget_mb:
                continue  # can never fit: not a feasible placement
            free = None
            if self.budget_mb is not None and mode is Mode.GPU_NOW:
                held = [self.known_vram_mb(u) for u in self.concurrent[t] if base[u] is Mode.GPU_NOW]
                if all(v is not None for v in held):
                    free = self.budget_mb - sum(held)  # type: ignore[arg-type]
            text = (
                f"hint: mapping unchanged for {rounds_same} rounds; {t} on {self.label(mode)} "
                "has never run in a feasible execution"
            )
            if need is not None and mode is not Mode.CPU:
                text += f" (needs {need:.0f} MB"
                text += f"; {free:.0f} MB free beside the gpu_now tasks that run with it)" if free is not None else ")"
            out.append(Hint(text, t, mode, need if mode is not Mode.CPU else None, free))
        return out

    # ---- rendering ---------------------------------------------------------------------------
    def summarize(self, ev: Evidence) -> list[str]:
        return summary_lines(ev, self.space, self.budget_mb)
