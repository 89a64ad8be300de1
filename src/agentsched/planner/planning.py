"""agent-plan's search and change watch (``PlanningMixin`` of ``PlanPolicy``): fit and calibrate the model,
search the judged values from the incumbent, the previous candidates and (restarts) the heuristic seeds and
a diverse perturbation of the incumbent, moving each OOM conflict's tasks together; and the change tests that
open a new epoch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agentsched.model.execution import Execution
from agentsched.model.mapping import format_mapping
from agentsched.planner import seeds as sd
from agentsched.planner.calibrate import from_evidence
from agentsched.planner.change import ChangeWatch
from agentsched.planner.model import Fit
from agentsched.planner.predict import Predictor, critical_focus
from agentsched.planner.search import (
    REPLAN_EVALS,
    SMALL_TASKS,
    Key,
    SearchResult,
    draws_and_candidates,
    eval_budget,
    rescore,
    search,
)

DIVERSE_SHARE = 0.1  # a large workflow's diverse restart moves this share of the incumbent's tasks


class PlanningMixin:
    """Search and change detection of ``PlanPolicy`` (state and judging live there)."""

    _pending: list[dict[str, Any]]

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
        pred = Predictor(
            self.ctx.workflow,
            params,
            robust=True,
            vram_margin_mb=self.safety.margin_mb,
            keep_holds=bool(self.safety.conflicts),
        )
        self._pred, self._nominal = pred, nominal
        if not after_probe:  # one probe barely moves the residuals: recalibrated at the next decision
            self.calibration = from_evidence(self.evidence, nominal.predict, self.widen)
        top = draws_and_candidates(len(self.ids))[1]
        robust = lambda k: self._judge(pred, k)  # noqa: E731
        best = self._incumbent()
        if len(self.ids) > SMALL_TASKS:
            if after_probe and self._last_keys:
                res = rescore(self._last_keys + ([best] if best is not None else []), robust, top)
            else:
                found = self._search(fit, pred, lambda k: self._judge(nominal, k), top * 2)
                res = rescore(
                    [c.key for c in found.candidates] + ([best] if best is not None else []),
                    robust,
                    top,
                    found.evaluations,
                )
        else:
            res = self._search(fit, pred, robust, top)
        if not res.candidates:
            res = self._search(fit, pred, lambda k: self._judge(nominal, k), top)
        self._last_keys = [c.key for c in res.candidates]
        return fit, pred, res

    def _incumbent(self) -> Key | None:
        """The best measured mapping by its risk-adjusted median (``Evidence.best``)."""
        return self.evidence.best(self.config.risk_prior_runs, self.config.oom_cost)

    def _seeds(self, pred: Predictor) -> list[Key]:
        """Where the search starts: the incumbent and the previous candidates; on a large workflow, later
        decisions go on from the last one's best and the incumbent, with restarts every ``restart_every``
        decisions from the heuristic seeds and from a diverse perturbation of the incumbent."""
        n, best = len(self.ids), self._incumbent()
        seeds = ([best] if best is not None else []) + list(self.previous)
        restart = not self.previous or n <= SMALL_TASKS or self._decisions % self.config.restart_every == 0
        if self.previous and n > SMALL_TASKS:
            # confirming that each previous candidate is still a local optimum would spend the whole budget
            seeds = [self.previous[0]] + ([best] if best is not None and best != self.previous[0] else [])
            if restart and best is not None:
                seeds.append(self._diverse(best))
        if restart:
            seeds += [self.key(m) for m in self.card_seed_maps]
            seeds += [self.key(m) for m in sd.estimate_seeds(self.ctx.workflow, pred.params)]
        return seeds

    def _diverse(self, key: Key) -> Key:
        """``key`` with a random ``DIVERSE_SHARE`` of its tasks moved to another mode (a restart away from it)."""
        out = list(key)
        movable = [i for i, c in enumerate(self.choices) if len(c) > 1]
        for i in self.ctx.rng.sample(movable, max(1, int(DIVERSE_SHARE * len(movable)))) if movable else ():
            out[i] = self.ctx.rng.choice([m for m in self.choices[i] if m is not out[i]])
        return tuple(out)

    def _groups(self) -> list[list[int]]:
        """Tasks the search moves together: each OOM conflict's task and holders."""
        index = {t: i for i, t in enumerate(self.ids)}
        return [[index[t] for t in (c.task, *sorted(c.holders))] for c in self.safety.conflicts]

    def _search(self, fit: Fit, pred: Predictor, judge, top: int) -> SearchResult:
        n = len(self.ids)
        state = np.concatenate(
            [
                fit.theta,
                [fit.log_cpu_ms[u] for u in sorted(fit.log_cpu_ms)],
                [fit.log_load_ms[u] for u in sorted(fit.log_load_ms)],
            ]
        )
        best = self._incumbent()
        if (
            n <= SMALL_TASKS
            and self.previous
            and self._searched_at is not None
            and len(state) == len(self._searched_at)
            and float(np.max(np.abs(state - self._searched_at), initial=0.0)) < self.config.drift
        ):
            return rescore(self.previous + ([best] if best is not None else []), judge, top)
        focus = critical_focus(pred) if n > SMALL_TASKS else None
        first = not self.previous
        limit = 4096 if first else 0
        evals = eval_budget(n) if first or n > SMALL_TASKS else REPLAN_EVALS
        res = search(
            judge,
            self.choices,
            self._seeds(pred),
            self.ctx.rng,
            max_evals=evals,
            exhaustive_limit=limit,
            top=top,
            focus=focus,
            groups=self._groups(),
        )
        self._searched_at = state
        return res

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
            feeds.append(
                (
                    "model",
                    (math.log(x.e2e_ms) - math.log(self._expected.pop(key))) / math.hypot(self.calibration.sd, sd),
                )
            )
        for stream, z in feeds:
            d = self.watch.feed(stream, z) if z is not None else 0
            if d:
                self._change(stream, key, d)
                return

    def _change(self, source: str, key: Key, direction: int) -> None:
        """A detected change: a new epoch (old measurements, OOMs and GPU runs no longer count), wider
        uncertainty, a fresh search and probes to re-explore."""
        rec = {
            "source": source,
            "direction": "slower" if direction > 0 else "faster",
            "epoch": self.evidence.epoch + 1,
            "round": self.rounds_seen,
            "executions": self.evidence.executions,
            "mapping": format_mapping(self.ctx.workflow, dict(zip(self.ids, key, strict=True))),
        }
        self.changes.append(rec)
        self._pending.append(rec)
        self.evidence.new_epoch()
        self.safety.new_epoch()
        self.model.forget_gpu_runs()
        self.watch = ChangeWatch()
        self.widen = self.config.change_widen
        self._near.clear()
        self.previous, self._searched_at = [], None
        self._expected.clear()
        self.extra_probes += 2 * self.probes_per_round
