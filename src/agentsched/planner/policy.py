"""``agent-plan``: the model-based planner as a loop policy.

Each round: fit the online model to every execution seen (rounds and probes); judge mappings by what they measured
in the current epoch (``evidence.py``: median with a noise interval), unmeasured ones by the prediction corrected
by the model's own residuals (``calibrate.py``), each valued at its OOM risk under timing noise and observed
conflicts (``vram.py``); search (exhaustive when small, local search otherwise, seeded by HEFT, the rules' round 0,
estimate-based mappings and the best measured); probe by expected improvement over the best measured mapping while
the budget allows, stale evidence (a mapping, a tool's GPU figures not seen for a while: ``evidence.changed_prob``)
re-checked by the same value, so a change the incumbent's runs cannot show is found; confirm an unmeasured choice
with one probe before a round runs it; probe a near-budget mapping the model predicts infeasible or risky when
the expected gain over the invocations left beats the expected cost of a failure, within a failure budget
(``probing.py``); run the best judged mapping (the last round, or after a failed probe: the incumbent, the best
measured mapping by risk-adjusted median). A measured mapping is judged by its failure rate (one OOM in many
clean runs is a small price); one that only ever failed is not proposed again in its epoch. Change tests (``change.py``) watch re-runs and first runs; a
detection opens a new epoch (old evidence and GPU runs dropped, uncertainty widened, probes granted) and is
reported in the proposal and round info (``"change"``).

Cold start (``agent-plan-cold``): round 0 follows the tags like agent-rules-cold; its runs plus up to
two profiling probes (``seeds.gpu_profile``, ``seeds.cpu_profile``) give the model its figures.

Options: ``start`` (warm|cold), ``probe_fraction`` (probes as a fraction of the round executions, default 0.1;
of the rounds so far when the run has no end), ``probes_per_round`` (default 2), ``min_gain`` (default 0.01),
``config`` (``PlanConfig``: the tuned numbers, e.g. ``{"failure_budget": 0.02}``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from agentsched.errors import PolicyError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import format_mapping
from agentsched.model.options import STARTS
from agentsched.model.rounds import speaks
from agentsched.model.workflow import Mode, Workflow
from agentsched.planner import seeds as sd
from agentsched.planner.calibrate import Calibration
from agentsched.planner.change import ChangeWatch
from agentsched.planner.config import PlanConfig, plan_config
from agentsched.planner.evidence import Evidence
from agentsched.planner.model import DEFAULT_NOISE_SIGMA, Fit, PlanModel
from agentsched.planner.planning import PlanningMixin
from agentsched.planner.predict import Prediction, Predictor
from agentsched.planner.probing import ProbingMixin
from agentsched.planner.search import (
    SMALL_TASKS,
    Key,
    SearchResult,
    check_plan_size,
    rescore,
)
from agentsched.planner.timeline import observe
from agentsched.planner.vram import VramSafety, explained_peak_mb, risk_factor, vram_floor_mb
from agentsched.policies.base import MappingT, Policy, PolicyContext, Proposal, RoundResult

DEFAULT_PROBE_FRACTION = 0.1
CARD_VRAM_SLACK = 1.3  # a tool may hold up to this times its card's VRAM (CUDA context, allocator cache)


def _number(name: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise PolicyError(f"agent-plan: {name} must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


class PlanPolicy(PlanningMixin, ProbingMixin, Policy):
    """Model-based planner: online contention model + predictor + search + probing by value, judged
    by what it measured (``evidence.py``), safe on VRAM (``vram.py``), watching for change (``change.py``)."""

    name = "agent-plan"
    online = True

    def __init__(
        self,
        *,
        start: str = "warm",
        probe_fraction: float = DEFAULT_PROBE_FRACTION,
        probes_per_round: int = 2,
        min_gain: float = 0.01,
        config: PlanConfig | dict[str, Any] | None = None,
    ) -> None:
        if start not in STARTS:
            raise PolicyError(f"agent-plan start must be warm or cold, got {start!r}")
        self.start = start  # warm: the cards; cold: names, tags and workload lines only
        self.probe_fraction = _number("probe_fraction", probe_fraction, 0.0, 1.0)
        self.probes_per_round = int(_number("probes_per_round", probes_per_round, 0, 100))
        self.min_gain = _number("min_gain", min_gain, 0.0, 1.0)
        self.config = plan_config(config)

    @property
    def label(self) -> str:
        return "agent-plan" + ("-cold" if self.start == "cold" else "")

    def check_workflow(self, workflow: Workflow) -> None:
        check_plan_size(workflow, self.label)

    # ---- state -------------------------------------------------------------------------------
    def reset(self, ctx: PolicyContext) -> None:
        self.check_workflow(ctx.workflow)  # also for callers that skip the preflight
        super().reset(ctx)
        wf = ctx.workflow
        self.warm = self.start == "warm"
        self.tags = {t: tuple(c.tags) for t, c in ctx.cards.items()}  # names and tags: known in both starts
        self.model = PlanModel.for_workflow(wf, ctx.cards if self.warm else None, self.tags)
        self.ids = wf.task_ids
        modes = wf.decision_space.modes
        self.choices = [modes if self.model.has_gpu(t) else (Mode.CPU,) for t in self.ids]
        self.np_rng = np.random.default_rng(ctx.rng.getrandbits(64))
        self.evidence = Evidence()  # per-mapping runs of the current epoch
        cfg = self.config
        self.safety = VramSafety(
            conflict_risk=cfg.conflict_risk, half_runs=cfg.conflict_half_runs, min_weight=cfg.conflict_min_weight
        )  # timing error, VRAM margin, OOM conflicts
        self._near: dict[Key, float] = {}  # near-budget probe candidates -> would-be E2E (``probing.py``)
        self._failed_probe = False  # a probe of this decision failed: the round runs the incumbent
        self._decisions = 0
        self.calibration = Calibration()  # the model's residuals: correction and uncertainty
        self.widen = 1.0  # uncertainty multiplier right after a detected change (decays to 1)
        self.watch = ChangeWatch()  # the change tests
        self.changes: list[dict[str, Any]] = []  # every detection (audit)
        self._pending: list[dict[str, Any]] = []  # detections not yet reported in a proposal
        self._expected: dict[Key, float] = {}  # judged E2E of a mapping when it was chosen unmeasured
        self.seen_modes: set[tuple[str, bool]] = set()  # (task, ran on GPU) observed finishing
        self.extra_probes = 0  # probes granted by detected changes (re-exploration)
        self.probes_used = 0
        self.rounds_seen = 0
        self.previous: list[Key] = []  # last decision's candidates (seeds of the next search)
        self._last_keys: list[Key] = []  # the last plan's candidates (re-scored after a probe, large workflows)
        self._searched_at: np.ndarray | None = None  # the model's numbers at the last search
        self._noise_sigma = DEFAULT_NOISE_SIGMA  # the last fit's per-task noise (no refit per execution)
        self._pred: Predictor | None = None  # the robust predictor of the last plan
        self._nominal: Predictor | None = None  # the same model, nominal start order only
        self.card_seed_maps = sd.card_seeds(wf, ctx.cards) if self.warm else []

    @property
    def infeasible(self) -> set[Key]:
        """Mappings that only ever failed (OOM, error) under the current conditions: never proposed again."""
        return {k for k in self.evidence.by_key if self.evidence.failed(k)}

    @property
    def probe_budget(self) -> int:
        """Probes allowed in the run: a fraction of its round executions (of the rounds so far when the
        run has no end), plus what detected changes granted."""
        rounds = self.ctx.rounds if self.ctx.rounds is not None else self.rounds_seen + 1
        return int(self.probe_fraction * rounds * self.ctx.repeats) + self.extra_probes

    def key(self, mapping: MappingT) -> Key:
        return tuple(mapping[t] for t in self.ids)

    def _vram_estimate(self, task: str) -> float:
        u = self.model.unit[task]
        return max(self.model.priors[u].vram_mb or 0.0, self.model.vram_seen.get(u, 0.0))

    def _vram_most(self, task: str) -> float | None:
        """The most VRAM ``task`` may hold: what it was seen holding, else its card plus the most a card
        understates (None: unknown, cold start)."""
        u = self.model.unit[task]
        if u in self.model.vram_seen:
            return self.model.vram_seen[u]
        card = self.model.priors[u].vram_mb
        return None if card is None else card * CARD_VRAM_SLACK

    def _record(self, x: Execution, against: bool | None = None) -> None:  # RoundResult.counts_against
        key = self.key(x.mapping)
        obs = observe(x, lambda s: self.model.has_gpu(s.task))
        contended = {r.task: r.run_ms for r in obs.gpu if not r.isolated}
        self._detect(key, x, contended)
        self.model.add(obs)
        self.evidence.saw_gpu(self.model.unit[r.task] for r in obs.gpu)
        if x.ok and x.e2e_ms is not None:
            self.evidence.add(key, x.e2e_ms)
            self.evidence.add_tasks(key, contended)
            vram_of = {sp.task: self._vram_estimate(sp.task) for sp in x.spans if sp.vram_mb > 0}
            self.safety.learn_peak(x.peak_vram_mb, explained_peak_mb(x, vram_of))
            self.safety.learn_clean(x.mapping)
        elif speaks(x, (x,), self.evidence.measured(key) is not None) if against is None else against:
            risk = 1.0
            if self._pred is not None:
                p = self._pred.predict(key)
                risk = 1.0 if p.e2e_ms is None else self.safety.risk(p.timing_slack)
            self.evidence.add(key, None)
            if x.status is Status.OOM:
                self._learn_oom(x, risk)
        for s in x.spans:
            if s.end_ms is not None:
                self.seen_modes.add((s.task, s.mode is not Mode.CPU and self.model.has_gpu(s.task)))

    def _learn_oom(self, x: Execution, risk: float) -> None:
        """An OOM: its conflict, and a floor on the failing tool's real VRAM (need > budget - held)."""
        self.safety.learn_oom(x, risk)
        floor = vram_floor_mb(x, self.ctx.workflow.vram_budget_mb, {t: self._vram_most(t) for t in self.ids})
        if floor is not None and self.model.has_gpu(floor[0]):
            self.model.learn_vram_floor(*floor)

    def record(self, x: Execution, against: bool | None = None) -> None:
        """Feed one execution seen elsewhere to the model (the agent's prediction stream: agent/forecast.py)."""
        self._record(x, against)

    # ---- planning ------------------------------------------------------------------------------
    def plan(self) -> tuple[Fit, Predictor, SearchResult]:
        """Fit the model to what it has seen and search under it; runs nothing (no probe, no round).
        The predictor returned is the nominal one; the candidates are feasible under it, best predicted first."""
        fit, _, res = self._plan()
        nominal = self._nominal
        assert nominal is not None
        found = rescore([c.key for c in res.candidates], lambda k: nominal.predict(k).e2e_ms, len(res.candidates))
        return fit, nominal, SearchResult(found.candidates, res.evaluations, res.exhaustive)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "start": self.start,
            "probe_fraction": self.probe_fraction,
            "probes_per_round": self.probes_per_round,
            "min_gain": self.min_gain,
            "config": self.config.model_dump(),
        }

    def _judge(self, pred: Predictor, key: Key) -> float | None:
        """What a mapping is worth now: its measured median times the cost of its failure rate (failures
        and clean runs of this epoch over a prior at the predicted risk) if it ran clean in this epoch, else
        the corrected prediction at its risk; None when it only ever failed in this epoch or is too risky
        for a round (then it may still be a near-budget probe candidate: ``probing.py``)."""
        if self.evidence.failed(key):
            return None
        p = pred.predict(key)
        if self.evidence.measured(key) is None:
            return self._value(p, key, note=True)
        cfg = self.config
        return self.evidence.adjusted_ms(
            key, min(self._risk(p, key), cfg.max_oom_risk), cfg.risk_prior_runs, cfg.oom_cost
        )

    def _risk(self, p: Prediction, key: Key) -> float:
        mapping = dict(zip(self.ids, key, strict=True)) if self.safety.conflicts else None
        return self.safety.risk(p.timing_slack, mapping, p.holds)

    def _value(self, p: Prediction, key: Key, noise: float = 0.0, note: bool = False) -> float | None:
        """A prediction's worth: corrected by the residuals, times ``exp(noise)``, times the cost of its
        risk of running out of memory (``vram.risk_factor``); None when infeasible or too risky for a round
        (``note``: then remembered as a near-budget probe candidate if within the model's uncertainty)."""
        risk = self._risk(p, key) if p.e2e_ms is not None else 1.0
        if risk > self.config.max_oom_risk:
            if note:
                self._note_near(p, key)
            return None
        return (
            self.calibration.correct(p.e2e_ms, p.overlap)
            * math.exp(noise)
            * risk_factor(  # type: ignore[arg-type]
                risk, self.config.oom_cost
            )
        )

    def _choose(self, pred: Predictor, res: SearchResult, last: bool) -> tuple[Key, float, str]:
        """The best judged mapping. On a small workflow an unmeasured mapping beats the incumbent only by
        more than ``min_gain`` (a round of it costs a whole round); in the last round only by more than
        twice its calibrated uncertainty (the run ends on what it measured otherwise). After a failed probe
        the round runs the incumbent; nothing judged feasible runs the incumbent too (all-CPU without one)."""
        pool = [c.key for c in res.candidates]
        best = self._incumbent()
        best_ms = self._judge(pred, best) if best is not None else None
        if best is not None and best_ms is not None and self._failed_probe:
            return best, best_ms, f"a probe failed: back to the incumbent, the best measured mapping ({best_ms:.0f} ms)"
        if best is not None and best not in pool:
            pool.append(best)
        scored = sorted((v, [m.value for m in k], k) for k in pool if (v := self._judge(pred, k)) is not None)
        if not scored:  # nothing feasible predicted or measured: all-CPU, always within any budget
            key = tuple(Mode.CPU for _ in self.ids)
            return key, math.inf, "no feasible mapping predicted: every task on the CPU"
        score, _, key = scored[0]
        # a large workflow's search improves by small steps across rounds: no gate there
        gate = self.min_gain if len(self.ids) <= SMALL_TASKS else 0.0
        if best is not None and best_ms is not None and key != best:
            if last:  # the run ends on what it measured, unless a prediction is better beyond its doubt
                gate = 1 - math.exp(-2 * self.calibration.sd)
            if score >= best_ms * (1 - gate):
                key, score = best, best_ms
        ev = self.evidence.measured(key)
        if ev is not None:
            lo, hi = self.evidence.interval(key)  # type: ignore[misc]
            fails = self.evidence.failures(key)
            why = (
                f"{'last round: ' if last else ''}best measured mapping ({score:.0f} ms risk-adjusted, median of "
                f"{ev.runs} run(s){f' and {fails} failure(s)' if fails else ''}, noise interval {lo:.0f}-{hi:.0f} ms)"
            )
        else:
            why = (
                f"best predicted mapping ({score:.0f} ms corrected by the model's residuals, "
                f"uncertainty x{math.exp(self.calibration.sd):.3f}; not run yet)"
            )
        return key, score, why

    # ---- one decision ------------------------------------------------------------------------
    def propose(self, round_index: int) -> Proposal:
        t0 = time.perf_counter()
        wf = self.ctx.workflow
        if not self.warm and self.evidence.executions == 0:
            m = sd.tag_mapping(wf, self.tags)
            return self._proposal(
                m, "round 0, cold start: compute-bound tags on the GPU, the rest on the CPU", None, None, t0, []
            )
        notes: list[str] = []
        self._failed_probe = False
        self._decisions += 1
        if not self.warm:
            self._profile(notes)
            self._failed_probe = False  # a profile is no probe of a candidate
        fit, pred, res = self._plan()
        last = self.ctx.rounds is not None and round_index >= self.ctx.rounds - 1
        per_round = 0
        while not last and per_round < self.probes_per_round and self._may_probe() and not self._failed_probe:
            target = self._probe_target(fit, pred, res)
            if target is None:
                break
            again = "re-checking a stale measurement, " if self.evidence.measured(target[0]) else ""
            self._probe_key(target[0], notes, f"{again}expected gain {target[1]:.1%}")
            per_round += 1
            fit, pred, res = self._plan(after_probe=True)
        if not last and per_round < self.probes_per_round and self._may_probe() and not self._failed_probe:
            risky = self._risky_target(round_index)
            if risky is not None:
                self._probe_key(risky[0], notes, risky[1])
                fit, pred, res = self._plan(after_probe=True)
        choice, score, why = self._choose(pred, res, last)
        for _ in range(self.config.confirm_probes):  # one run of an unmeasured choice before a round commits to it
            if (
                last
                or self._incumbent() is None
                or self.evidence.measured(choice) is not None
                or not self._may_probe()
                or self._failed_probe
            ):
                break
            self._probe_key(choice, notes, "confirming before a round runs it")
            fit, pred, res = self._plan(after_probe=True)
            choice, score, why = self._choose(pred, res, last)
        keys = {c.key for c in res.candidates}
        self.previous = [c.key for c in res.candidates] + ([choice] if choice not in keys else [])
        if self.evidence.measured(choice) is None and math.isfinite(score):
            self._expected[choice] = score
        m = dict(zip(self.ids, choice, strict=True))
        nominal = self._nominal.predict(choice).e2e_ms if self._nominal is not None else None
        return self._proposal(m, why, nominal, res, t0, notes, fit)

    def _proposal(
        self,
        m: MappingT,
        reason: str,
        predicted: float | None,
        res: SearchResult | None,
        t0: float,
        notes: list[str],
        fit: Fit | None = None,
    ) -> Proposal:
        info: dict[str, Any] = {
            "reasoner": "plan",
            "reason": reason,
            "response": reason,
            "mapping": format_mapping(self.ctx.workflow, m),
            "predicted_e2e_ms": None if predicted is None else round(predicted, 3),
            "probe_budget": {"fraction": self.probe_fraction, "allowed": self.probe_budget, "used": self.probes_used},
            "notes": notes,
            "evidence": self._evidence_info(),
            "probing": self._probes_info(),
        }
        if self._pending:
            info["change"] = {"epoch": self.evidence.epoch, "detections": list(self._pending)}
            self._pending = []
        if res is not None:
            info["search"] = {
                "evaluations": res.evaluations,
                "exhaustive": res.exhaustive,
                "candidates": len(res.candidates),
            }
        if fit is not None:
            info["model"] = {"gpu_runs": fit.gpu_runs, "noise_sigma": round(fit.noise_sigma, 4)}
        info["planner_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        return Proposal(m, info)

    def _evidence_info(self) -> dict[str, Any]:
        ev = self.evidence
        return {
            "epoch": ev.epoch,
            "measured_mappings": len(ev.measured_keys()),
            "failed_mappings": len(self.infeasible),
            "run_sd": round(ev.run_sd(), 4),
            "calibration": self.calibration.to_dict(),
            "vram": self.safety.to_dict(),
        }

    def observe(self, result: RoundResult) -> dict[str, Any]:
        self.rounds_seen += 1
        before = len(self.changes)
        for x in result.executions if result.judged else ():  # nothing to judge: no evidence, no model update
            self._record(x, result.counts_against(x))
        self.widen = max(1.0, self.widen * self.config.widen_decay)
        # no refit here (the next proposal fits): the GPU runs held, and the noise of the last fit
        runs = sum(len(v) for v in self.model.gpu_runs.values())
        out: dict[str, Any] = {
            "model": {"gpu_runs": runs, "noise_sigma": round(self._noise_sigma, 4)},
            "probes_used": self.probes_used,
            "probe_budget": self.probe_budget,
            "epoch": self.evidence.epoch,
        }
        if len(self.changes) > before:
            out["change"] = {"epoch": self.evidence.epoch, "detections": self.changes[before:]}
        return out
