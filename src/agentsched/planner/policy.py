"""``agent-plan``: the model-based planner as a loop policy.

Each round: fit the online model to every execution seen (rounds and probes); judge mappings by what they measured
in the current epoch (``evidence.py``: median with a noise interval), unmeasured ones by the prediction corrected
by the model's own residuals (``calibrate.py``), each valued at its OOM risk under timing noise and observed
conflicts (``vram.py``); search (exhaustive when small, local search otherwise, seeded by HEFT, the rules' round 0,
estimate-based mappings and the best measured); probe by expected improvement over the best measured mapping while
the budget allows, stale evidence (a mapping, a tool's GPU figures not seen for a while: ``evidence.changed_prob``)
re-checked by the same value, so a change the incumbent's runs cannot show is found; confirm an unmeasured choice
with one probe before a round runs it; run the best judged mapping (the last round: the best measured). A mapping
that failed is never proposed again in its epoch. Change tests (``change.py``) watch re-runs and first runs; a
detection opens a new epoch (old evidence and GPU runs dropped, uncertainty widened, probes granted) and is
reported in the proposal and round info (``"change"``).

Cold start (``agent-plan-cold``): round 0 follows the tags like agent-rules-cold; its runs plus up to
two profiling probes (``seeds.gpu_profile``, ``seeds.cpu_profile``) give the model its figures.

Options: ``start`` (warm|cold), ``probe_fraction`` (probes as a fraction of the round executions, default 0.1;
of the rounds so far when the run has no end), ``probes_per_round`` (default 2), ``min_gain`` (default 0.01).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from agentsched.planner import seeds as sd
from agentsched.planner.calibrate import PRIOR_SD, Calibration, from_evidence
from agentsched.planner.change import ChangeWatch
from agentsched.planner.evidence import SHIFT_SD, Evidence
from agentsched.planner.model import DEFAULT_NOISE_SIGMA, Fit, PlanModel
from agentsched.planner.predict import Prediction, Predictor, critical_focus
from agentsched.planner.probe import candidate_values, worth_probing
from agentsched.planner.search import (
    REPLAN_EVALS,
    SMALL_TASKS,
    Key,
    SearchResult,
    check_plan_size,
    draws_and_candidates,
    eval_budget,
    rescore,
    search,
)
from agentsched.planner.timeline import observe
from agentsched.planner.vram import VramSafety, explained_peak_mb, risk_factor
from agentsched.errors import PolicyError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import format_mapping
from agentsched.model.options import STARTS
from agentsched.model.rounds import speaks
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies.base import MappingT, Policy, PolicyContext, Proposal, RoundResult

DEFAULT_PROBE_FRACTION = 0.1
MAX_OOM_RISK = 0.5  # a mapping more likely than this to run out of memory is not a candidate
RISK_PRIOR_RUNS = 4.0  # a measured mapping's OOM risk: the predicted one x 4 / (4 + runs without failure)
CONFIRM_PROBES = 2  # probes of an unmeasured choice before a round runs it
CHANGE_WIDEN = 2.0  # prediction uncertainty multiplier right after a detected change
WIDEN_DECAY = 0.8  # per round, back towards 1
DRIFT = 0.02  # largest change of a log-parameter under which the previous candidates are only re-scored


def _number(name: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise PolicyError(f"agent-plan: {name} must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


class PlanPolicy(Policy):
    """Model-based planner: online contention model + predictor + search + probing by value, judged
    by what it measured (``evidence.py``), safe on VRAM (``vram.py``), watching for change (``change.py``)."""

    name = "agent-plan"
    online = True

    def __init__(self, *, start: str = "warm", probe_fraction: float = DEFAULT_PROBE_FRACTION,
                 probes_per_round: int = 2, min_gain: float = 0.01) -> None:
        if start not in STARTS:
            raise PolicyError(f"agent-plan start must be warm or cold, got {start!r}")
        self.start = start  # warm: the cards; cold: names, tags and workload lines only
        self.probe_fraction = _number("probe_fraction", probe_fraction, 0.0, 1.0)
        self.probes_per_round = int(_number("probes_per_round", probes_per_round, 0, 100))
        self.min_gain = _number("min_gain", min_gain, 0.0, 1.0)

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
        self.safety = VramSafety()  # timing error, VRAM margin, OOM conflicts
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
        """Mappings that failed (OOM, error) under the current conditions: never proposed again."""
        return {k for k, ev in self.evidence.by_key.items() if ev.failures}

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
        elif speaks(x, (x,), self.evidence.measured(key) is not None) if against is None else against:
            risk = 1.0
            if self._pred is not None:
                p = self._pred.predict(key)
                risk = 1.0 if p.e2e_ms is None else self.safety.risk(p.timing_slack)
            self.evidence.add(key, None)
            if x.status is Status.OOM:
                self.safety.learn_oom(x, risk)
        for s in x.spans:
            if s.end_ms is not None:
                self.seen_modes.add((s.task, s.mode is not Mode.CPU and self.model.has_gpu(s.task)))

    def record(self, x: Execution, against: bool | None = None) -> None:
        """Feed one execution seen elsewhere to the model (the agent's prediction stream: agent/forecast.py)."""
        self._record(x, against)

    # ---- change detection ----------------------------------------------------------------------
    def _detect(self, key: Key, x: Execution, contended: dict[str, float]) -> None:
        """Feed the change tests (``change.ChangeWatch``): a re-run of a mapping measured 3+ times in this
        epoch against its median (its contended GPU tasks against theirs, and its E2E), and a mapping's
        first run against what the planner expected of it."""
        if not x.ok or x.e2e_ms is None or x.e2e_ms <= 0:
            return
        ev = self.evidence.measured(key)
        sd = self.evidence.run_sd()
        feeds: list[tuple[str, float | None]] = []
        if ev is not None:
            feeds.append(("tasks", self.evidence.task_z(key, contended, self._noise_sigma)))
            if ev.runs >= 3:
                feeds.append(("measured", (math.log(x.e2e_ms) - math.log(ev.median_ms)) / sd))  # type: ignore[arg-type]
        elif key in self._expected:
            feeds.append(("model", (math.log(x.e2e_ms) - math.log(self._expected.pop(key)))
                          / math.hypot(self.calibration.sd, sd)))
        for stream, z in feeds:
            d = self.watch.feed(stream, z) if z is not None else 0
            if d:
                self._change(stream, key, d)
                return

    def _change(self, source: str, key: Key, direction: int) -> None:
        """A detected change: a new epoch (old measurements, OOMs and GPU runs no longer count), wider
        uncertainty, a fresh search and probes to re-explore."""
        rec = {"source": source, "direction": "slower" if direction > 0 else "faster",
               "epoch": self.evidence.epoch + 1, "round": self.rounds_seen, "executions": self.evidence.executions,
               "mapping": format_mapping(self.ctx.workflow, dict(zip(self.ids, key, strict=True)))}
        self.changes.append(rec)
        self._pending.append(rec)
        self.evidence.new_epoch()
        self.safety.new_epoch()
        self.model.forget_gpu_runs()
        self.watch = ChangeWatch()
        self.widen = CHANGE_WIDEN
        self.previous, self._searched_at = [], None
        self._expected.clear()
        self.extra_probes += 2 * self.probes_per_round

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
        return {"name": self.name, "label": self.label, "start": self.start, "probe_fraction": self.probe_fraction,
                "probes_per_round": self.probes_per_round, "min_gain": self.min_gain}

    def _may_probe(self) -> bool:
        """Within the planner's probe budget and, under the runtime, its exploration budget."""
        allowed = self.ctx.probe_allowed
        return self.probes_used < self.probe_budget and (allowed is None or allowed())

    def _probe(self, mapping: MappingT) -> Execution:
        x = self.ctx.probe(mapping)
        self.probes_used += 1
        self._record(x)
        return x

    def _probe_key(self, key: Key, notes: list[str], why: str) -> None:
        if self.evidence.measured(key) is None and self._pred is not None:
            v = self._judge(self._pred, key)
            if v is not None:
                self._expected[key] = v
        m = dict(zip(self.ids, key, strict=True))
        x = self._probe(m)
        notes.append(f"probed {format_mapping(self.ctx.workflow, m)} ({why}): "
                     + (f"{x.e2e_ms:.0f} ms" if x.ok and x.e2e_ms is not None else f"{x.status}"))

    def _judge(self, pred: Predictor, key: Key) -> float | None:
        """What a mapping is worth now: its measured median if it ran in this epoch, else the corrected
        prediction; None when it failed in this epoch, matches an OOM conflict or may run out of VRAM."""
        if self.evidence.failed(key):
            return None
        ev = self.evidence.measured(key)
        if ev is None:
            return self._value(pred.predict(key), key)
        # measured: its median, divided by the chance it does not fail; the predicted risk shrinks with
        # every run that did not fail (a Beta-like update with RISK_PRIOR_RUNS pseudo-runs)
        risk = self._risk(pred.predict(key), key) * RISK_PRIOR_RUNS / (RISK_PRIOR_RUNS + ev.runs)
        return ev.median_ms * risk_factor(min(risk, MAX_OOM_RISK))  # type: ignore[operator]

    def _risk(self, p: Prediction, key: Key) -> float:
        mapping = dict(zip(self.ids, key, strict=True)) if self.safety.conflicts else None
        return self.safety.risk(p.timing_slack, mapping)

    def _value(self, p: Prediction, key: Key, noise: float = 0.0) -> float | None:
        """A prediction's worth: corrected by the residuals, times ``exp(noise)``, times the cost of its
        risk of running out of memory (``_risk_factor``); None when that risk is too high."""
        if p.e2e_ms is None:
            return None
        risk = self._risk(p, key)
        if risk > MAX_OOM_RISK:
            return None
        return self.calibration.correct(p.e2e_ms, p.overlap) * math.exp(noise) * risk_factor(risk)

    def _plan(self, after_probe: bool = False) -> tuple[Fit, Predictor, SearchResult]:
        """Fit, calibrate, then search the judged values: exhaustive (small) or local search at the first
        decision; later, local search around the previous candidates (a large workflow's search so goes on
        round after round), or on a small workflow only a re-score of them when the model barely moved.
        A large workflow searches under the nominal start order and judges its candidates' OOM risk after
        (the timing slack costs as much as a prediction), and after a probe (``after_probe``) only re-scores
        them. When no mapping is robustly feasible, the search falls back on the nominal start order."""
        fit = self.model.fit()
        self._noise_sigma = fit.noise_sigma
        params = self.model.params(fit)
        nominal = Predictor(self.ctx.workflow, params)
        pred = Predictor(self.ctx.workflow, params, robust=True, vram_margin_mb=self.safety.margin_mb)
        self._pred, self._nominal = pred, nominal
        if not after_probe:  # one probe barely moves the residuals: recalibrated at the next decision
            self.calibration = from_evidence(self.evidence, nominal.predict, self.widen)
        top = draws_and_candidates(len(self.ids))[1]
        robust = lambda k: self._judge(pred, k)  # noqa: E731
        best = self.evidence.best()
        if len(self.ids) > SMALL_TASKS:
            if after_probe and self._last_keys:
                res = rescore(self._last_keys + ([best] if best is not None else []), robust, top)
            else:
                found = self._search(fit, pred, lambda k: self._judge(nominal, k), top * 2)
                res = rescore([c.key for c in found.candidates], robust, top, found.evaluations)
        else:
            res = self._search(fit, pred, robust, top)
        if not res.candidates:
            res = self._search(fit, pred, lambda k: self._judge(nominal, k), top)
        self._last_keys = [c.key for c in res.candidates]
        return fit, pred, res

    def _search(self, fit: Fit, pred: Predictor, judge, top: int) -> SearchResult:
        n = len(self.ids)
        state = np.concatenate([fit.theta, [fit.log_cpu_ms[u] for u in sorted(fit.log_cpu_ms)],
                                [fit.log_load_ms[u] for u in sorted(fit.log_load_ms)]])
        best = self.evidence.best()
        if (n <= SMALL_TASKS and self.previous and self._searched_at is not None
                and len(state) == len(self._searched_at)
                and float(np.max(np.abs(state - self._searched_at), initial=0.0)) < DRIFT):
            return rescore(self.previous + ([best] if best is not None else []), judge, top)
        seeds = list(self.previous)
        if best is not None:
            seeds.insert(0, best)
        if self.previous and n > SMALL_TASKS:
            # a later decision on a large workflow goes on from the last one's best: confirming that each
            # previous candidate is still a local optimum would spend the whole budget on one pass each
            seeds = [self.previous[0]] + ([best] if best is not None and best != self.previous[0] else [])
        if not self.previous or n <= SMALL_TASKS:
            # later decisions on a large workflow start from where the last one ended instead of
            # descending from the same heuristic seeds again: the search goes on across rounds
            seeds += [self.key(m) for m in self.card_seed_maps]
            seeds += [self.key(m) for m in sd.estimate_seeds(self.ctx.workflow, pred.params)]
        focus = critical_focus(pred) if n > SMALL_TASKS else None
        first = not self.previous
        limit = 4096 if first else 0
        evals = eval_budget(n) if first or n > SMALL_TASKS else REPLAN_EVALS
        res = search(judge, self.choices, seeds, self.ctx.rng, max_evals=evals, exhaustive_limit=limit, top=top,
                     focus=focus)
        self._searched_at = state
        return res

    def _choose(self, pred: Predictor, res: SearchResult, last: bool) -> tuple[Key, float, str]:
        """The best judged mapping. On a small workflow an unmeasured mapping beats the best measured one
        only by more than ``min_gain`` (a round of it costs a whole round); in the last round only by
        more than twice its calibrated uncertainty (the run ends on what it measured otherwise)."""
        pool = [c.key for c in res.candidates]
        best = self.evidence.best()
        if best is not None and best not in pool:
            pool.append(best)
        scored = sorted((v, [m.value for m in k], k) for k in pool if (v := self._judge(pred, k)) is not None)
        if not scored:  # nothing feasible predicted: fall back on all-CPU, always within any budget
            key = tuple(Mode.CPU for _ in self.ids)
            return key, math.inf, "no feasible mapping predicted: every task on the CPU"
        score, _, key = scored[0]
        # a large workflow's search improves by small steps across rounds: no gate there
        gate = self.min_gain if len(self.ids) <= SMALL_TASKS else 0.0
        if best is not None and key != best:
            best_ms = self.evidence.by_key[best].median_ms
            if last:  # the run ends on what it measured, unless a prediction is better beyond its doubt
                gate = 1 - math.exp(-2 * self.calibration.sd)
            if score >= best_ms * (1 - gate):  # type: ignore[operator]
                key, score = best, best_ms  # type: ignore[assignment]
        ev = self.evidence.measured(key)
        if ev is not None:
            lo, hi = self.evidence.interval(key)  # type: ignore[misc]
            why = (f"{'last round: ' if last else ''}best measured mapping ({score:.0f} ms, median of {ev.runs} "
                   f"run(s), noise interval {lo:.0f}-{hi:.0f} ms)")
        else:
            why = (f"best predicted mapping ({score:.0f} ms corrected by the model's residuals, "
                   f"uncertainty x{math.exp(self.calibration.sd):.3f}; not run yet)")
        return key, score, why

    def _probe_target(self, fit: Fit, pred_mean: Predictor, res: SearchResult) -> tuple[Key, float] | None:
        """The unmeasured candidate with the largest expected improvement over the best measured mapping
        (its median), under posterior draws of the model with the residuals' uncertainty, if its
        optimistic gain is worth a run. A draw in which the candidate may run out of VRAM counts as a loss."""
        draws, _ = draws_and_candidates(len(self.ids))
        ev = self.evidence
        pool = [c.key for c in res.candidates if ev.measured(c.key) is None and not ev.failed(c.key)]
        incumbent = ev.best()
        stale = ev.stale_keys(incumbent)  # measured, unseen for a while: a re-check valued like a candidate
        if incumbent is None:  # nothing run yet: compare against the model's own favourite
            incumbent = min((c.key for c in res.candidates), key=lambda k: self._judge(pred_mean, k) or math.inf,
                            default=None)
            pool = [k for k in pool if k != incumbent]
        if not (pool or stale) or incumbent is None:
            return None
        samples = self.model.samples(draws, self.np_rng, fit, ev.units_changed(), SHIFT_SD)
        preds = [Predictor(self.ctx.workflow, s, robust=True, vram_margin_mb=self.safety.margin_mb)
                 for s in samples]
        cal = self.calibration
        # the residuals' spread joins the draws once the model has erred beyond the prior (or after a change)
        spread = cal.sd if cal.sd > PRIOR_SD or self.widen > 1 else 0.0
        noise = self.np_rng.standard_normal((len(pool) + 1, draws)) * spread

        def drawn(k: Key, row: np.ndarray) -> list[float | None]:
            return [self._value(p.predict(k), k, float(e)) for p, e in zip(preds, row, strict=True)]

        inc_ev = ev.measured(incumbent)
        inc = [inc_ev.median_ms] * draws if inc_ev is not None else drawn(incumbent, noise[-1])
        # a stale mapping's level now: what it measured and what the model predicts, maybe changed since
        stale_rows = [list(ev.stale_draws(k, self.np_rng, draws, None if v is None else (v, cal.sd)))
                      for k in stale for v in [self._value(pred_mean.predict(k), k)]]
        keys = pool + stale
        values = candidate_values(inc, [drawn(k, noise[j]) for j, k in enumerate(pool)] + stale_rows)
        threshold = max(self.min_gain, fit.noise_sigma / 2)
        i = max(range(len(keys)), key=lambda j: (values[j].expected_gain, -j))
        if not worth_probing(values[i], threshold):
            return None
        return keys[i], values[i].expected_gain

    # ---- one decision ------------------------------------------------------------------------
    def propose(self, round_index: int) -> Proposal:
        t0 = time.perf_counter()
        wf = self.ctx.workflow
        if not self.warm and self.evidence.executions == 0:
            m = sd.tag_mapping(wf, self.tags)
            return self._proposal(m, "round 0, cold start: compute-bound tags on the GPU, the rest on the CPU",
                                  None, None, t0, [])
        notes: list[str] = []
        if not self.warm:
            self._profile(notes)
        fit, pred, res = self._plan()
        last = self.ctx.rounds is not None and round_index >= self.ctx.rounds - 1
        per_round = 0
        while not last and per_round < self.probes_per_round and self._may_probe():
            target = self._probe_target(fit, pred, res)
            if target is None:
                break
            again = "re-checking a stale measurement, " if self.evidence.measured(target[0]) else ""
            self._probe_key(target[0], notes, f"{again}expected gain {target[1]:.1%}")
            per_round += 1
            fit, pred, res = self._plan(after_probe=True)
        choice, score, why = self._choose(pred, res, last)
        for _ in range(CONFIRM_PROBES):  # one run of an unmeasured choice before a round commits to it
            if last or self.evidence.best() is None or self.evidence.measured(choice) is not None \
                    or not self._may_probe():
                break
            self._probe_key(choice, notes, "confirming before a round runs it")
            fit, pred, res = self._plan(after_probe=True)
            choice, score, why = self._choose(pred, res, last)
        self.previous = [c.key for c in res.candidates] + ([choice] if choice not in {c.key for c in res.candidates} else [])
        if self.evidence.measured(choice) is None and math.isfinite(score):
            self._expected[choice] = score
        m = dict(zip(self.ids, choice, strict=True))
        nominal = self._nominal.predict(choice).e2e_ms if self._nominal is not None else None
        return self._proposal(m, why, nominal, res, t0, notes, fit)

    def _proposal(self, m: MappingT, reason: str, predicted: float | None, res: SearchResult | None, t0: float,
                  notes: list[str], fit: Fit | None = None) -> Proposal:
        info: dict[str, Any] = {
            "reasoner": "plan", "reason": reason, "response": reason,
            "mapping": format_mapping(self.ctx.workflow, m),
            "predicted_e2e_ms": None if predicted is None else round(predicted, 3),
            "probe_budget": {"fraction": self.probe_fraction, "allowed": self.probe_budget,
                             "used": self.probes_used},
            "notes": notes,
            "evidence": self._evidence_info(),
        }
        if self._pending:
            info["change"] = {"epoch": self.evidence.epoch, "detections": list(self._pending)}
            self._pending = []
        if res is not None:
            info["search"] = {"evaluations": res.evaluations, "exhaustive": res.exhaustive,
                              "candidates": len(res.candidates)}
        if fit is not None:
            info["model"] = {"gpu_runs": fit.gpu_runs, "noise_sigma": round(fit.noise_sigma, 4)}
        info["planner_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        return Proposal(m, info)

    def _evidence_info(self) -> dict[str, Any]:
        ev = self.evidence
        return {"epoch": ev.epoch, "measured_mappings": len(ev.measured_keys()), "failed_mappings": len(self.infeasible),
                "run_sd": round(ev.run_sd(), 4), "calibration": self.calibration.to_dict(), "vram": self.safety.to_dict()}

    # ---- cold start ----------------------------------------------------------------------------
    def _profile(self, notes: list[str]) -> None:
        """Cold start: up to two profiling probes (``seeds.gpu_profile``, ``seeds.cpu_profile``), the other
        tasks as in the best measured mapping."""
        allowed = self.ctx.probe_allowed
        if allowed is not None and not allowed():
            return
        for make in (sd.gpu_profile, sd.cpu_profile):
            best = self.evidence.best()
            base = dict(zip(self.ids, best, strict=True)) if best is not None else {t: Mode.CPU for t in self.ids}
            got = make(self.ctx.workflow, self.tags, self.model.has_gpu, self.seen_modes, base)
            if got is not None:
                self._probe(got[0])
                notes.append(got[1])

    def observe(self, result: RoundResult) -> dict[str, Any]:
        self.rounds_seen += 1
        before = len(self.changes)
        for x in result.executions if result.judged else ():  # nothing to judge: no evidence, no model update
            self._record(x, result.counts_against(x))
        self.widen = max(1.0, self.widen * WIDEN_DECAY)
        # no refit here (the next proposal fits): the GPU runs held, and the noise of the last fit
        runs = sum(len(v) for v in self.model.gpu_runs.values())
        out: dict[str, Any] = {"model": {"gpu_runs": runs, "noise_sigma": round(self._noise_sigma, 4)},
                               "probes_used": self.probes_used, "probe_budget": self.probe_budget,
                               "epoch": self.evidence.epoch}
        if len(self.changes) > before:
            out["change"] = {"epoch": self.evidence.epoch, "detections": self.changes[before:]}
        return out
