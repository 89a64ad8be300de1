"""agent-plan's probes: which mapping is worth an execution outside the rounds (``ProbingMixin``).

* By expected improvement (``_probe_target``): the unmeasured candidate, or a stale measurement, whose
  expected gain over the incumbent under posterior draws of the model is largest, if its optimistic
  gain exceeds the noise threshold (``probe.py``).
* Near the budget (``_risky_target``): a mapping predicted infeasible, or feasible at a risk too high for
  a round, while within the model's uncertainty (``vram.feasibility_distance``, ``infeasible_risk``),
  keeps its would-be E2E with its risk. It is probed when the expected gain over the invocations left,
  ``(1 - risk) x gain x remaining``, exceeds the expected cost of a failure, ``risk x (1 + oom_cost)``
  invocations, and the run's failure budget (``PlanConfig.failure_budget`` of its executions) still
  holds ``risk`` more failures.
* Cold start: the profiling probes (``seeds.gpu_profile``, ``seeds.cpu_profile``).

A failed probe sends the round back to the incumbent (``PlanPolicy._choose``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agentsched.model.execution import Execution
from agentsched.model.mapping import format_mapping
from agentsched.model.workflow import Mode
from agentsched.planner import seeds as sd
from agentsched.planner.calibrate import PRIOR_SD
from agentsched.planner.evidence import SHIFT_SD, Key
from agentsched.planner.model import Fit
from agentsched.planner.predict import Prediction, Predictor
from agentsched.planner.probe import candidate_values, worth_probing
from agentsched.planner.search import SearchResult, draws_and_candidates
from agentsched.planner.vram import infeasible_risk
from agentsched.policies.base import MappingT

NEAR_KEPT = 64  # near-budget mappings remembered as probe candidates (the best by would-be E2E)
ENDLESS_HORIZON_ROUNDS = 10  # an endless run values a risky probe over this many rounds ahead


class ProbingMixin:
    """Probe selection of ``PlanPolicy`` (state and judging live there)."""

    _near: dict[Key, float]
    _failed_probe: bool

    # ---- budget and execution -----------------------------------------------------------------
    def _may_probe(self) -> bool:
        """Within the planner's probe budget and, under the runtime, its exploration budget."""
        allowed = self.ctx.probe_allowed
        return self.probes_used < self.probe_budget and (allowed is None or allowed())

    def _probe(self, mapping: MappingT) -> Execution:
        x = self.ctx.probe(mapping)
        self.probes_used += 1
        self._record(x)
        if not x.ok:
            self._failed_probe = True
        return x

    def _probe_key(self, key: Key, notes: list[str], why: str) -> Execution:
        if self.evidence.measured(key) is None and self._pred is not None:
            v = self._judge(self._pred, key)
            if v is not None:
                self._expected[key] = v
        m = dict(zip(self.ids, key, strict=True))
        x = self._probe(m)
        notes.append(
            f"probed {format_mapping(self.ctx.workflow, m)} ({why}): "
            + (f"{x.e2e_ms:.0f} ms" if x.ok and x.e2e_ms is not None else f"{x.status}")
        )
        return x

    # ---- near the budget --------------------------------------------------------------------
    def _near_value(self, p: Prediction, key: Key) -> tuple[float, float] | None:
        """(would-be E2E corrected by the residuals, OOM risk) of a mapping too risky for a round, or None
        when it is no probe candidate either (certainly infeasible, or beyond ``max_probe_risk``)."""
        if p.e2e_ms is not None:
            ms, risk = p.e2e_ms, self._risk(p, key)
        elif p.e2e_if_fits_ms is not None and math.isfinite(p.infeasible_by):
            sd_t = max(self.safety.timing_sd, self.calibration.sd)
            ms, risk = p.e2e_if_fits_ms, max(infeasible_risk(p.infeasible_by, sd_t), self._risk(p, key))
        else:
            return None
        if risk > self.config.max_probe_risk:
            return None
        return self.calibration.correct(ms, p.overlap), risk

    def _note_near(self, p: Prediction, key: Key) -> None:
        """Remember a near-budget mapping the search met (its value is recomputed when probing)."""
        got = self._near_value(p, key)
        if got is None:
            return
        self._near[key] = got[0]
        if len(self._near) > 2 * NEAR_KEPT:
            kept = sorted(self._near.items(), key=lambda kv: kv[1])[:NEAR_KEPT]
            self._near = dict(kept)

    def _risky_target(self, round_index: int) -> tuple[Key, str] | None:
        """The near-budget mapping whose expected gain over the invocations left beats the expected cost
        of its failure by the most, if the failure budget allows it."""
        cfg, ev, pred = self.config, self.evidence, self._pred
        inc = ev.best(cfg.risk_prior_runs, cfg.oom_cost)
        if inc is None or pred is None or not self._near:
            return None
        inc_ms = self._judge(pred, inc)
        if inc_ms is None:
            return None
        rounds = self.ctx.rounds
        left = (rounds - round_index if rounds is not None else ENDLESS_HORIZON_ROUNDS) * self.ctx.repeats
        total = (rounds if rounds is not None else self.rounds_seen + ENDLESS_HORIZON_ROUNDS) * self.ctx.repeats
        allowed = cfg.failure_budget * (total + self.probe_budget)
        threshold = max(self.min_gain, self._noise_sigma / 2)
        best: tuple[float, Key, float, float] | None = None
        for key in list(self._near):
            if ev.measured(key) is not None or ev.failed(key):
                continue
            got = self._near_value(pred.predict(key), key)
            if got is None:
                continue
            ms, risk = got
            gain = (inc_ms - ms) / inc_ms
            net = (1 - risk) * gain * left - risk * (1 + cfg.oom_cost)
            if gain > threshold and net > 0 and ev.failed_total + risk <= allowed and (best is None or net > best[0]):
                best = (net, key, gain, risk)
        if best is None:
            return None
        _, key, gain, risk = best
        return key, f"near the budget: {gain:.1%} better if it fits, risk {risk:.0%}"

    # ---- by expected improvement ---------------------------------------------------------------
    def _probe_target(self, fit: Fit, pred_mean: Predictor, res: SearchResult) -> tuple[Key, float] | None:
        """The unmeasured candidate with the largest expected improvement over the incumbent (its
        risk-adjusted median), under posterior draws of the model with the residuals' uncertainty, if its
        optimistic gain is worth a run. A draw in which the candidate may run out of VRAM counts as a loss."""
        draws, _ = draws_and_candidates(len(self.ids))
        ev, cfg = self.evidence, self.config
        pool = [c.key for c in res.candidates if ev.measured(c.key) is None and not ev.failed(c.key)]
        incumbent = ev.best(cfg.risk_prior_runs, cfg.oom_cost)
        stale = ev.stale_keys(incumbent)  # measured, unseen for a while: a re-check valued like a candidate
        if incumbent is None:  # nothing run yet: compare against the model's own favourite
            incumbent = min(
                (c.key for c in res.candidates), key=lambda k: self._judge(pred_mean, k) or math.inf, default=None
            )
            pool = [k for k in pool if k != incumbent]
        if not (pool or stale) or incumbent is None:
            return None
        samples = self.model.samples(draws, self.np_rng, fit, ev.units_changed(), SHIFT_SD)
        preds = [Predictor(self.ctx.workflow, s, robust=True, vram_margin_mb=self.safety.margin_mb) for s in samples]
        cal = self.calibration
        # the residuals' spread joins the draws once the model has erred beyond the prior (or after a change)
        spread = cal.sd if cal.sd > PRIOR_SD or self.widen > 1 else 0.0
        noise = self.np_rng.standard_normal((len(pool) + 1, draws)) * spread

        def drawn(k: Key, row: np.ndarray) -> list[float | None]:
            return [self._value(p.predict(k), k, float(e)) for p, e in zip(preds, row, strict=True)]

        inc_ms = ev.adjusted_ms(incumbent, 0.0, cfg.risk_prior_runs, cfg.oom_cost)
        inc = [inc_ms] * draws if inc_ms is not None else drawn(incumbent, noise[-1])
        # a stale mapping's level now: what it measured and what the model predicts, maybe changed since
        stale_rows = [
            list(ev.stale_draws(k, self.np_rng, draws, None if v is None else (v, cal.sd)))
            for k in stale
            for v in [self._value(pred_mean.predict(k), k)]
        ]
        keys = pool + stale
        values = candidate_values(inc, [drawn(k, noise[j]) for j, k in enumerate(pool)] + stale_rows)
        threshold = max(self.min_gain, fit.noise_sigma / 2)
        i = max(range(len(keys)), key=lambda j: (values[j].expected_gain, -j))
        if not worth_probing(values[i], threshold):
            return None
        return keys[i], values[i].expected_gain

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

    def _probes_info(self) -> dict[str, Any]:
        return {"near_budget": len(self._near), "failed_probe": self._failed_probe}
