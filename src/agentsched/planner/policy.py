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
from agentsched.planner.model import Fit, PlanModel
from agentsched.planner.predict import Predictor
from agentsched.planner.probe import candidate_values, worth_probing
from agentsched.planner.search import Candidate, Key, SearchResult, search
from agentsched.planner.timeline import observe
from agentsched.errors import PolicyError
from agentsched.model.execution import Execution
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


REPLAN_EVALS = 300  # a later decision's local search around the previous candidates (small workflows)
DRIFT = 0.02  # largest change of a log-parameter under which the previous candidates are only re-scored


def _number(name: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise PolicyError(f"agent-plan: {name} must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


class PlanPolicy(Policy):
    """Model-based planner: online contention model + predictor + search + probing by value."""

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
        self.measured: dict[Key, list[float]] = {}  # mapping -> E2E of its feasible runs
        self.infeasible: set[Key] = set()  # mappings seen running out of memory
        self.seen_modes: set[tuple[str, bool]] = set()  # (task, ran on GPU) observed finishing
        self.probe_budget = int(self.probe_fraction * (ctx.rounds or 1) * ctx.repeats)  # endless: grows per round
        self.probes_used = 0
        self.previous: list[Key] = []  # last decision's candidates (seeds of the next search)
        self._searched_at: np.ndarray | None = None  # the model's numbers at the last search
        self.card_seed_maps = sd.card_seeds(wf, ctx.cards) if self.warm else []

    def key(self, mapping: MappingT) -> Key:
        return tuple(mapping[t] for t in self.ids)

    def _record(self, x: Execution) -> None:
        self.model.add(observe(x, lambda s: self.model.has_gpu(s.task)))
        k = self.key(x.mapping)
        if x.ok and x.e2e_ms is not None:
            self.measured.setdefault(k, []).append(x.e2e_ms)
        else:
            self.infeasible.add(k)
        for s in x.spans:
            if s.end_ms is not None:
                self.seen_modes.add((s.task, s.mode is not Mode.CPU and self.model.has_gpu(s.task)))

    def record(self, x: Execution) -> None:
        """Feed one execution seen elsewhere to the model (the agent's prediction stream: agent/forecast.py)."""
        self._record(x)

    def plan(self) -> tuple[Fit, Predictor, SearchResult]:
        """Fit the model to what it has seen and search under it; runs nothing (no probe, no round)."""
        return self._plan()

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

    # ---- one decision ------------------------------------------------------------------------
    def propose(self, round_index: int) -> Proposal:
        t0 = time.perf_counter()
        wf = self.ctx.workflow
        if self.ctx.rounds is None:  # endless: a per-round allowance, for the rounds elapsed
            self.probe_budget = int(self.probe_fraction * (round_index + 1) * self.ctx.repeats)
        if not self.warm and not self.measured and not self.infeasible:
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
            key, value = target
            self._probe(dict(zip(self.ids, key, strict=True)))
            per_round += 1
            notes.append(f"probed {format_mapping(wf, dict(zip(self.ids, key, strict=True)))} "
                         f"(expected gain {value:.1%})")
            fit, pred, res = self._plan()
        choice, score, why = self._choose(pred, res, last)
        self.previous = [c.key for c in res.candidates] + ([choice] if choice not in {c.key for c in res.candidates} else [])
        m = dict(zip(self.ids, choice, strict=True))
        return self._proposal(m, why, pred.predict(choice).e2e_ms, res, t0, notes, fit)

    def _proposal(self, m: MappingT, reason: str, predicted: float | None, res: SearchResult | None, t0: float,
                  notes: list[str], fit: Fit | None = None) -> Proposal:
        info: dict[str, Any] = {
            "reasoner": "plan", "reason": reason, "response": reason,
            "mapping": format_mapping(self.ctx.workflow, m),
            "predicted_e2e_ms": None if predicted is None else round(predicted, 3),
            "probe_budget": {"fraction": self.probe_fraction, "allowed": self.probe_budget,
                             "used": self.probes_used},
            "notes": notes,
        }
        if res is not None:
            info["search"] = {"evaluations": res.evaluations, "exhaustive": res.exhaustive,
                              "candidates": len(res.candidates)}
        if fit is not None:
            info["model"] = {"gpu_runs": fit.gpu_runs, "noise_sigma": round(fit.noise_sigma, 4)}
        info["planner_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        return Proposal(m, info)

    def _plan(self) -> tuple[Fit, Predictor, SearchResult]:
        """Fit, then search: exhaustive (small) or local search at the first decision; later, local search
        around the previous candidates (a large workflow's search so goes on round after round), or on a
        small workflow only a re-score of them when the model barely moved."""
        fit = self.model.fit()
        pred = Predictor(self.ctx.workflow, self.model.params(fit))
        n = len(self.ids)
        state = np.concatenate([fit.theta, [fit.log_cpu_ms[u] for u in sorted(fit.log_cpu_ms)],
                                [fit.log_load_ms[u] for u in sorted(fit.log_load_ms)]])
        best = self._best_measured()
        top = draws_and_candidates(n)[1]
        if (n <= SMALL_TASKS and self.previous and self._searched_at is not None
                and len(state) == len(self._searched_at)
                and float(np.max(np.abs(state - self._searched_at), initial=0.0)) < DRIFT):
            keys = list(dict.fromkeys(self.previous + ([best] if best is not None else [])))
            scored = sorted((v, [m.value for m in k], k) for k in keys
                            if (v := pred.predict(k).e2e_ms) is not None)
            cands = tuple(Candidate(k, v) for v, _, k in scored[:top])
            return fit, pred, SearchResult(cands, len(keys), False)
        seeds = list(self.previous)
        if best is not None:
            seeds.insert(0, best)
        if self.previous and n > SMALL_TASKS:
            # a later decision on a large workflow goes on from the last one's best: confirming that each
            # previous candidate is still a local optimum would spend the whole budget on one pass each
            seeds = [self.previous[0]]
        if not self.previous or n <= SMALL_TASKS:
            # later decisions on a large workflow start from where the last one ended instead of
            # descending from the same heuristic seeds again: the search goes on across rounds
            seeds += [self.key(m) for m in self.card_seed_maps]
            seeds += [self.key(m) for m in sd.estimate_seeds(self.ctx.workflow, pred.params)]
        focus = _critical_focus(pred) if n > SMALL_TASKS else None
        first = not self.previous
        limit = 4096 if first else 0
        evals = eval_budget(n) if first or n > SMALL_TASKS else REPLAN_EVALS
        res = search(lambda k: pred.predict(k).e2e_ms, self.choices, seeds, self.ctx.rng,
                     max_evals=evals, exhaustive_limit=limit, top=top, focus=focus)
        self._searched_at = state
        return fit, pred, res

    def _best_measured(self) -> Key | None:
        ok = [(sum(v) / len(v), k) for k, v in self.measured.items() if k not in self.infeasible]
        return min(ok, key=lambda x: x[0])[1] if ok else None

    def _score(self, pred: Predictor, key: Key) -> float:
        """Prediction pooled with the measured runs (one prediction counts as one run)."""
        if key in self.infeasible:
            return math.inf
        p = pred.predict(key).e2e_ms
        runs = self.measured.get(key, [])
        if p is None:
            return math.inf if not runs else sum(runs) / len(runs)
        return (p + sum(runs)) / (1 + len(runs))

    def _choose(self, pred: Predictor, res: SearchResult, last: bool) -> tuple[Key, float, str]:
        pool = [c.key for c in res.candidates]
        best = self._best_measured()
        if best is not None and best not in pool:
            pool.append(best)
        if not pool:  # nothing feasible predicted: fall back on all-CPU, always within any budget
            key = tuple(Mode.CPU for _ in self.ids)
            return key, math.inf, "no feasible mapping predicted: every task on the CPU"
        scored = sorted(((self._score(pred, k), [m.value for m in k], k) for k in pool))
        score, _, key = scored[0]
        runs = len(self.measured.get(key, []))
        why = (f"{'last round: ' if last else ''}best predicted mapping ({score:.0f} ms"
               f"{f', pooled with {runs} run(s)' if runs else ', not run yet'})")
        return key, score, why

    def _probe_target(self, fit: Fit, pred_mean: Predictor, res: SearchResult) -> tuple[Key, float] | None:
        """The candidate with the largest expected improvement, if its optimistic gain is worth a run."""
        draws, _ = draws_and_candidates(len(self.ids))
        pool = [c.key for c in res.candidates if c.key not in self.measured and c.key not in self.infeasible]
        incumbent = self._best_measured()
        if incumbent is None:  # nothing run yet: compare against the model's own favourite
            incumbent = min((c.key for c in res.candidates), key=lambda k: self._score(pred_mean, k), default=None)
            pool = [k for k in pool if k != incumbent]
        if not pool or incumbent is None:
            return None
        samples = self.model.samples(draws, self.np_rng, fit)
        preds = [Predictor(self.ctx.workflow, s) for s in samples]
        inc = [p.predict(incumbent).e2e_ms for p in preds]
        cands = [[p.predict(k).e2e_ms for p in preds] for k in pool]
        values = candidate_values(inc, cands)
        threshold = max(self.min_gain, fit.noise_sigma / 2)
        i = max(range(len(pool)), key=lambda j: (values[j].expected_gain, -j))
        if not worth_probing(values[i], threshold):
            return None
        return pool[i], values[i].expected_gain

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
        best = self._best_measured()
        return best[self.ids.index(task)] if best is not None else Mode.CPU

    def observe(self, result: RoundResult) -> dict[str, Any]:
        for x in result.executions:
            self._record(x)
        fit = self.model.fit()
        return {"model": {"gpu_runs": fit.gpu_runs, "noise_sigma": round(fit.noise_sigma, 4)},
                "probes_used": self.probes_used, "probe_budget": self.probe_budget}


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
