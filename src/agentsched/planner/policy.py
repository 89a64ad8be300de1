"""``agent-plan``: the model-based planner as a loop policy (a ``Policy`` subclass; the ``Reasoner``
protocol of the ``agent`` branch did not exist when this was written).

Each round: fit the online model to every execution seen (rounds and probes); search the mappings
under the fitted predictor (exhaustive when small, local search otherwise, seeded by HEFT, the rules'
round 0, simple estimate-based mappings and last round's best); then, while the probe budget
allows, probe the candidate with the largest expected improvement under the model's uncertainty
as long as its optimistic gain exceeds the noise threshold, refitting after each probe; finally run
the candidate with the best score (the prediction, pooled with measurements where there are some).

Cold start (``agent-plan-cold``): round 0 follows the tags like agent-rules-cold; its runs plus up to
two profiling probes (the tasks never seen on the CPU on the CPU; the tasks never seen on the GPU
on gpu_queue in three-way, gpu_now in binary) give the model its latencies and VRAM.

Options: ``start`` (warm|cold), ``probe_fraction`` (probes allowed as a fraction of the round
executions, default 0.1), ``probes_per_round`` (default 2), ``min_gain`` (noise threshold floor,
default 0.01).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from agentsched.planner import seeds as sd
from agentsched.planner.calibrate import Calibration, calibrate
from agentsched.planner.change import PageHinkley, ph_update
from agentsched.planner.evidence import Evidence
from agentsched.planner.model import DEFAULT_NOISE_SIGMA, Fit, PlanModel
from agentsched.planner.predict import Prediction, Predictor
from agentsched.planner.probe import candidate_values, worth_probing
from agentsched.planner.search import Candidate, Key, SearchResult, search
from agentsched.planner.timeline import observe
from agentsched.planner.vram import VramSafety, explained_peak_mb
from agentsched.errors import PolicyError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import format_mapping
from agentsched.model.options import STARTS
from agentsched.model.workflow import DecisionSpace, Mode
from agentsched.policies.base import (
    MappingT,
    Policy,
    PolicyContext,
    Proposal,
    RoundResult,
)

DEFAULT_PROBE_FRACTION = 0.1
SMALL_TASKS = 12  # up to here the search and the value estimate get a generous budget


def eval_budget(n_tasks: int) -> int:
    """Distinct mappings the search may evaluate per decision (sized for < 1 s at 100 tasks, < 10 s at 1,000)."""
    return 3000 if n_tasks <= SMALL_TASKS else max(150, 50000 // n_tasks)


def draws_and_candidates(n_tasks: int) -> tuple[int, int]:
    """Posterior draws and candidates of the value estimate."""
    return (10, 6) if n_tasks <= SMALL_TASKS else (6, 3)


MAX_OOM_RISK = 0.5  # a mapping more likely than this to run out of memory is not a candidate
OOM_COST = 2.0  # a failed run counts as this many extra runs' time beyond its retry
RISK_PRIOR_RUNS = 4.0  # a measured mapping's OOM risk: the predicted one x 4 / (4 + runs without failure)
CONFIRM_PROBES = 2  # probes of an unmeasured choice before a round runs it
MODEL_CHANGE_THRESHOLD = 15.0  # Page-Hinkley threshold of the model-residual stream (first runs only)
CHANGE_WIDEN = 2.0  # prediction uncertainty multiplier right after a detected change
WIDEN_DECAY = 0.8  # per round, back towards 1
REPLAN_EVALS = 300  # a later decision's local search around the previous candidates (small workflows)
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

    def __init__(self, *, start: str | None = None, probe_fraction: float = DEFAULT_PROBE_FRACTION,
                 probes_per_round: int = 2, min_gain: float = 0.01) -> None:
        start = start or "warm"
        if start not in STARTS:
            raise PolicyError(f"agent-plan start must be warm or cold, got {start!r}")
        self.start = start  # warm: the cards; cold: names, tags and workload lines only
        self.probe_fraction = _number("probe_fraction", probe_fraction, 0.0, 1.0)
        self.probes_per_round = int(_number("probes_per_round", probes_per_round, 0, 100))
        self.min_gain = _number("min_gain", min_gain, 0.0, 1.0)

    @property
    def label(self) -> str:
        return "agent-plan" + ("-cold" if self.start == "cold" else "")

    # ---- state -------------------------------------------------------------------------------
    def reset(self, ctx: PolicyContext) -> None:
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
        self.ph_measured = PageHinkley()  # re-runs of measured mappings vs their epoch median
        self.ph_model = PageHinkley()  # first runs of mappings vs the corrected prediction
        self.ph_tasks = PageHinkley()  # contended GPU tasks of re-runs vs their epoch medians
        self.changes: list[dict[str, Any]] = []  # every detection (audit)
        self._pending: list[dict[str, Any]] = []  # detections not yet reported in a proposal
        self._expected: dict[Key, float] = {}  # judged E2E of a mapping when it was chosen unmeasured
        self.seen_modes: set[tuple[str, bool]] = set()  # (task, ran on GPU) observed finishing
        self.extra_probes = 0  # probes granted by detected changes (re-exploration)
        self.probes_used = 0
        self.rounds_seen = 0
        self.previous: list[Key] = []  # last decision's candidates (seeds of the next search)
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

    def _record(self, x: Execution) -> None:
        key = self.key(x.mapping)
        obs = observe(x, lambda s: self.model.has_gpu(s.task))
        contended = {r.task: r.run_ms for r in obs.gpu if not r.isolated}
        self._detect(key, x, contended)
        self.model.add(obs)
        if x.ok and x.e2e_ms is not None:
            self.evidence.add(key, x.e2e_ms)
            self.evidence.add_tasks(key, contended)
            vram_of = {t: self._vram_estimate(t) for t in self.ids}
            self.safety.learn_peak(x.peak_vram_mb, explained_peak_mb(x, vram_of))
        else:
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

    def record(self, x: Execution) -> None:
        """Feed one execution seen elsewhere to the model (the agent's prediction stream: agent/forecast.py)."""
        self._record(x)

    # ---- change detection ----------------------------------------------------------------------
    def _detect(self, key: Key, x: Execution, contended: dict[str, float]) -> None:
        """Feed the three change tests: a re-run of a mapping measured 3+ times in this epoch against its
        median (E2E, and its contended GPU tasks against theirs), and a mapping's first run against what
        the planner expected of it."""
        if not x.ok or x.e2e_ms is None or x.e2e_ms <= 0:
            return
        ev = self.evidence.measured(key)
        sd = self.evidence.run_sd()
        zt = self.evidence.task_z(key, contended, self._noise_sigma) if ev is not None else None
        if zt is not None:
            self.ph_tasks, d = ph_update(self.ph_tasks, zt)
            if d:
                self._change("tasks", key, d)
                return
        if ev is not None and ev.runs >= 3:
            z = (math.log(x.e2e_ms) - math.log(ev.median_ms)) / sd  # type: ignore[arg-type]
            self.ph_measured, d = ph_update(self.ph_measured, z)
            if d:
                self._change("measured", key, d)
        elif ev is None and key in self._expected:
            z = (math.log(x.e2e_ms) - math.log(self._expected.pop(key))) / math.hypot(self.calibration.sd, sd)
            self.ph_model, d = ph_update(self.ph_model, z, threshold=MODEL_CHANGE_THRESHOLD)
            if d:
                self._change("model", key, d)

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
        self.ph_measured, self.ph_model, self.ph_tasks = PageHinkley(), PageHinkley(), PageHinkley()
        self.widen = CHANGE_WIDEN
        self.previous, self._searched_at = [], None
        self._expected.clear()
        self.extra_probes += 2 * self.probes_per_round

    # ---- planning ------------------------------------------------------------------------------
    def plan(self) -> tuple[Fit, Predictor, SearchResult]:
        """Fit the model to what it has seen and search under it; runs nothing (no probe, no round).
        The predictor returned is the nominal one; every candidate is feasible under it."""
        fit, _, res = self._plan()
        nominal = self._nominal
        assert nominal is not None
        cands = tuple(c for c in res.candidates if nominal.predict(c.key).e2e_ms is not None)
        return fit, nominal, SearchResult(cands, res.evaluations, res.exhaustive)

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
        return ev.median_ms * _risk_factor(min(risk, MAX_OOM_RISK))  # type: ignore[operator]

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
        return self.calibration.correct(p.e2e_ms, p.overlap) * math.exp(noise) * _risk_factor(risk)

    def _calibrate(self, nominal: Predictor) -> None:
        pts = []
        for k in self.evidence.measured_keys():
            p = nominal.predict(k)
            med = self.evidence.by_key[k].median_ms
            if p.e2e_ms is not None and p.e2e_ms > 0 and med:
                pts.append((p.overlap, math.log(med) - math.log(p.e2e_ms), self.evidence.by_key[k].runs))
        self.calibration = calibrate(pts, self.evidence.run_sd(), self.widen)

    def _plan(self) -> tuple[Fit, Predictor, SearchResult]:
        """Fit, calibrate, then search the judged values: exhaustive (small) or local search at the first
        decision; later, local search around the previous candidates (a large workflow's search so goes on
        round after round), or on a small workflow only a re-score of them when the model barely moved.
        When no mapping is robustly feasible, the search falls back on the nominal start order."""
        fit = self.model.fit()
        self._noise_sigma = fit.noise_sigma
        params = self.model.params(fit)
        nominal = Predictor(self.ctx.workflow, params)
        pred = Predictor(self.ctx.workflow, params, robust=True, vram_margin_mb=self.safety.margin_mb)
        self._pred, self._nominal = pred, nominal
        self._calibrate(nominal)
        res = self._search(fit, pred, lambda k: self._judge(pred, k))
        if not res.candidates:
            res = self._search(fit, pred, lambda k: self._judge(nominal, k))
        return fit, pred, res

    def _search(self, fit: Fit, pred: Predictor, judge) -> SearchResult:
        n = len(self.ids)
        state = np.concatenate([fit.theta, [fit.log_cpu_ms[u] for u in sorted(fit.log_cpu_ms)],
                                [fit.log_load_ms[u] for u in sorted(fit.log_load_ms)]])
        best = self.evidence.best()
        top = draws_and_candidates(n)[1]
        if (n <= SMALL_TASKS and self.previous and self._searched_at is not None
                and len(state) == len(self._searched_at)
                and float(np.max(np.abs(state - self._searched_at), initial=0.0)) < DRIFT):
            keys = list(dict.fromkeys(self.previous + ([best] if best is not None else [])))
            scored = sorted((v, [m.value for m in k], k) for k in keys if (v := judge(k)) is not None)
            return SearchResult(tuple(Candidate(k, v) for v, _, k in scored[:top]), len(keys), False)
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
        focus = _critical_focus(pred) if n > SMALL_TASKS else None
        first = not self.previous
        limit = 4096 if first else 0
        evals = eval_budget(n) if first or n > SMALL_TASKS else REPLAN_EVALS
        res = search(judge, self.choices, seeds, self.ctx.rng, max_evals=evals, exhaustive_limit=limit, top=top,
                     focus=focus)
        self._searched_at = state
        return res

    def _choose(self, pred: Predictor, res: SearchResult, last: bool) -> tuple[Key, float, str]:
        """The best judged mapping; in the last round the best measured one. An unmeasured mapping beats
        the best measured one only by more than ``min_gain`` (one round of it costs a whole round)."""
        pool = [c.key for c in res.candidates]
        best = self.evidence.best()
        if best is not None and best not in pool:
            pool.append(best)
        scored = sorted((v, [m.value for m in k], k) for k in pool if (v := self._judge(pred, k)) is not None)
        if not scored:  # nothing feasible predicted: fall back on all-CPU, always within any budget
            key = tuple(Mode.CPU for _ in self.ids)
            return key, math.inf, "no feasible mapping predicted: every task on the CPU"
        score, _, key = scored[0]
        if best is not None and key != best:
            best_ms = self.evidence.by_key[best].median_ms
            if last or score >= best_ms * (1 - self.min_gain):  # type: ignore[operator]
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
        if incumbent is None:  # nothing run yet: compare against the model's own favourite
            incumbent = min((c.key for c in res.candidates), key=lambda k: _or_inf(self._judge(pred_mean, k)),
                            default=None)
            pool = [k for k in pool if k != incumbent]
        if not pool or incumbent is None:
            return None
        samples = self.model.samples(draws, self.np_rng, fit)
        preds = [Predictor(self.ctx.workflow, s, robust=True, vram_margin_mb=self.safety.margin_mb)
                 for s in samples]
        cal = self.calibration
        spread = cal.sd if cal.points >= 2 or self.widen > 1 else 0.0
        noise = self.np_rng.standard_normal((len(pool) + 1, draws)) * spread

        def drawn(k: Key, row: np.ndarray) -> list[float | None]:
            out: list[float | None] = []
            return [self._value(p.predict(k), k, float(e)) for p, e in zip(preds, row, strict=True)]

        inc_ev = ev.measured(incumbent)
        inc = [inc_ev.median_ms] * draws if inc_ev is not None else drawn(incumbent, noise[-1])
        values = candidate_values(inc, [drawn(k, noise[j]) for j, k in enumerate(pool)])
        threshold = max(self.min_gain, fit.noise_sigma / 2)
        i = max(range(len(pool)), key=lambda j: (values[j].expected_gain, -j))
        if not worth_probing(values[i], threshold):
            return None
        return pool[i], values[i].expected_gain

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
            self._probe_key(target[0], notes, f"expected gain {target[1]:.1%}")
            per_round += 1
            fit, pred, res = self._plan()
        choice, score, why = self._choose(pred, res, last)
        for _ in range(CONFIRM_PROBES):  # one run of an unmeasured choice before a round commits to it
            if last or self.evidence.best() is None or self.evidence.measured(choice) is not None \
                    or not self._may_probe():
                break
            self._probe_key(choice, notes, "confirming before a round runs it")
            fit, pred, res = self._plan()
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
        cal, ev = self.calibration, self.evidence
        return {"epoch": ev.epoch, "measured_mappings": len(ev.measured_keys()), "failed_mappings": len(self.infeasible),
                "run_sd": round(ev.run_sd(), 4),
                "calibration": {"a": round(cal.a, 4), "b": round(cal.b, 4), "sd": round(cal.sd, 4), "points": cal.points},
                "vram": {"timing_sd": round(self.safety.timing_sd, 4), "margin_mb": round(self.safety.margin_mb, 1),
                         "conflicts": len(self.safety.conflicts)}}

    # ---- cold start ----------------------------------------------------------------------------
    def _profile(self, notes: list[str]) -> None:
        """Cold start: one probe runs the GPU-capable tasks never seen on the GPU there (isolated on the
        queue in three-way, on gpu_now in binary; the others as in the best round), and one runs on the CPU the tasks never seen there
        except compute-bound ones (their CPU latency follows the GPU one by the tag's speedup: a CPU
        run of a dense model is the most expensive probe there is)."""
        wf = self.ctx.workflow
        allowed = self.ctx.probe_allowed
        if allowed is not None and not allowed():
            return
        no_gpu = [t for t in self.ids if self.model.has_gpu(t) and (t, True) not in self.seen_modes]
        # a task seen nowhere that is not compute-bound is profiled on the CPU in the same probe (one
        # probe instead of two); its GPU latency stays uncertain, so probing by value tries it if it could pay
        neither = [t for t in no_gpu if (t, False) not in self.seen_modes and "compute-bound" not in self.tags[t]]
        no_gpu = [t for t in no_gpu if t not in neither]
        if no_gpu:
            gpu_mode = Mode.GPU_QUEUE if wf.decision_space is DecisionSpace.THREE_WAY else Mode.GPU_NOW
            self._probe({t: (gpu_mode if t in no_gpu else Mode.CPU if t in neither else self._last_round_mode(t))
                         for t in self.ids})
            notes.append(f"cold-start profile: {', '.join(no_gpu)} on {wf.decision_space.label(gpu_mode)}")
        no_cpu = [t for t in self.ids if (t, False) not in self.seen_modes and "compute-bound" not in self.tags[t]]
        if no_cpu:
            self._probe({t: (Mode.CPU if t in no_cpu else self._last_round_mode(t)) for t in self.ids})
            notes.append(f"cold-start profile: {', '.join(no_cpu)} on the CPU")

    def _last_round_mode(self, task: str) -> Mode:
        best = self.evidence.best()
        return best[self.ids.index(task)] if best is not None else Mode.CPU


    def observe(self, result: RoundResult) -> dict[str, Any]:
        self.rounds_seen += 1
        before = len(self.changes)
        for x in result.executions:
            self._record(x)
        self.widen = max(1.0, self.widen * WIDEN_DECAY)
        fit = self.model.fit()
        out: dict[str, Any] = {"model": {"gpu_runs": fit.gpu_runs, "noise_sigma": round(fit.noise_sigma, 4)},
                               "probes_used": self.probes_used, "probe_budget": self.probe_budget,
                               "epoch": self.evidence.epoch}
        if len(self.changes) > before:
            out["change"] = {"epoch": self.evidence.epoch, "detections": self.changes[before:]}
        return out


def _risk_factor(risk: float) -> float:
    """Cost multiplier of an OOM risk: the retries a failure needs (1 / (1 - risk)) plus, as a failed
    invocation is worse than a slow one, ``OOM_COST`` times the expected failures per success."""
    return (1.0 + OOM_COST * risk / (1.0 - risk)) / (1.0 - risk)


def _or_inf(v: float | None) -> float:
    return math.inf if v is None else v


def _critical_focus(pred: Predictor):
    """Task indices worth moving first: the predicted critical path and the GPU tasks beside it."""
    ids = pred.ids
    wf = pred.workflow
    index = {t: i for i, t in enumerate(ids)}

    def focus(key: Key) -> list[int]:
        mapping = dict(zip(ids, key, strict=True))
        tl = pred.timeline(mapping)
        if not tl.prediction.feasible:  # out of memory: the GPU-resident tasks, largest first
            gpu = [t for t in ids if mapping[t] is not Mode.CPU]
            gpu.sort(key=lambda t: -pred.params[t].vram_needed_mb)
            return [index[t] for t in gpu[:50]]
        ends, starts, ready = tl.end_ms, tl.start_ms, tl.ready_ms
        t = max(wf.sinks, key=lambda s: ends.get(s, 0.0))
        path: list[str] = []
        eps = 1e-6 * max(1.0, ends[t])
        while t is not None and t not in path:
            path.append(t)
            s = starts[t]
            if s <= eps:
                break
            if s > ready.get(t, 0.0) + eps:  # waited for a resource (queue or CPU slot)
                t = next((u for u, e in ends.items() if abs(e - s) <= eps and u not in path), None)
            else:
                preds = wf.preds[t]
                t = max(preds, key=lambda u: ends.get(u, 0.0)) if preds else None
        crit = set(path)
        beside = [u for u in ids if u not in crit and mapping[u] is not Mode.CPU and any(
            mapping[c] is not Mode.CPU and starts[u] < ends[c] and starts[c] < ends[u] for c in path)]
        out = [index[u] for u in path] + [index[u] for u in beside[: 2 * len(path) + 10]]
        return out

    return focus
