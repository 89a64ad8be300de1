"""The agent's fifth evidence stream: the planner's top candidate mappings with
predicted E2E, peak VRAM and an uncertainty, for the prompt's optional "Model predictions" block.

A ``Forecaster`` keeps an ``agent-plan`` planner (``PlanPolicy``: the same online model, predictor
and search, not a copy) as a passive observer: it is fed every execution the agent sees (each
round's runs and the monitor's probes) and, before a proposal, fits and searches. It never runs
anything (its planner gets a probe budget of zero and a probe function that refuses), never reads
the testbed's world (the planner never does), and draws its randomness from its own generator
seeded once from the policy's, so the agent's other decisions are untouched.

The range of a candidate is the spread of its predicted E2E over draws from the model's posterior
(Laplace) of the GPU parameters (latency, contention sensitivity and pressure); CPU latencies and
load times enter at their posterior means, and run-to-run noise is reported separately.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from agentsched.agent.view import ModelPredictions, PredictedMapping
from agentsched.errors import PolicyError
from agentsched.model.execution import Execution
from agentsched.model.mapping import MappingT
from agentsched.model.workflow import Workflow
from agentsched.planner.policy import PlanPolicy
from agentsched.planner.predict import Predictor
from agentsched.planner.search import check_plan_size
from agentsched.policies.base import PolicyContext

TOP_K = 3  # candidates shown: enough to compare, few enough not to read as a menu
DRAWS = 16  # posterior draws behind each range
QUANTILES = (0.1, 0.9)  # the range: 10th to 90th percentile over the draws


def _refuse_probe(_mapping: MappingT) -> Execution:
    # why: the prediction stream only observes; an execution here would be an uncounted probe
    raise PolicyError("the model-prediction stream never runs an execution")


class Forecaster:
    """The planner's model fed by the agent's executions; ``predictions()`` gives the stream."""

    def __init__(self, start: str, top_k: int = TOP_K, draws: int = DRAWS) -> None:
        if top_k < 1 or draws < 2:
            raise PolicyError(f"model predictions need top_k >= 1 and draws >= 2, got {top_k} and {draws}")
        self.start = start  # warm: the cards are the prior; cold: names and tags only
        self.top_k = top_k
        self.draws = draws
        self.planner = PlanPolicy(start=start, probe_fraction=0.0, probes_per_round=0)
        self.executions = 0  # executions fed so far
        self._cached: tuple[int, ModelPredictions] | None = None

    @staticmethod
    def check(workflow: Workflow) -> None:
        """One-line ``PolicyError`` for a workflow larger than the planner's model takes on."""
        check_plan_size(workflow, "the model-prediction stream (agent-plan's model)", "turn predictions off")

    def reset(self, ctx: PolicyContext) -> None:
        """A new run: a fresh model from the cards (warm) or the tags (cold)."""
        self.check(ctx.workflow)
        own = replace(ctx, rng=random.Random(ctx.rng.getrandbits(64)), probe=_refuse_probe, probe_allowed=lambda: False)
        self.planner.reset(own)
        self.executions = 0
        self._cached = None

    def record(self, x: Execution, against: bool | None = None) -> None:
        """One execution the agent saw (a round's run, with ``RoundResult.counts_against``; or a monitor
        probe, None: judged alone)."""
        self.planner.record(x, against)
        self.executions += 1

    def predictions(self) -> ModelPredictions:
        """The top candidates under the model fitted to every execution recorded so far (cached until
        the next ``record``)."""
        if self._cached is not None and self._cached[0] == self.executions:
            return self._cached[1]
        out = self._compute()
        self._cached = (self.executions, out)
        return out

    def _compute(self) -> ModelPredictions:
        p = self.planner
        if self.start == "cold" and self.executions == 0:
            return ModelPredictions(
                (),
                0,
                0.0,
                self.draws,
                QUANTILES,
                0,
                False,
                note="cold start: the model has seen no execution yet, so it knows no latency",
            )
        fit, pred, res = p.plan()
        keys = [c.key for c in res.candidates if c.key not in p.infeasible][: self.top_k]
        samples = p.model.samples(self.draws, p.np_rng, fit)
        drawn = [Predictor(p.ctx.workflow, s) for s in samples]
        cands = []
        for key in keys:
            mean = pred.predict(key)
            assert mean.e2e_ms is not None  # the search returns feasible candidates only
            spread = [e for d in drawn if (e := d.predict(key).e2e_ms) is not None] or [mean.e2e_ms]
            lo, hi = (float(v) for v in np.quantile(spread, QUANTILES))
            cands.append(
                PredictedMapping(
                    dict(zip(p.ids, key, strict=True)),
                    mean.e2e_ms,
                    min(lo, mean.e2e_ms),
                    max(hi, mean.e2e_ms),
                    mean.peak_vram_mb,
                )
            )
        note = "" if cands else "the model predicts no feasible mapping that was not already seen failing"
        return ModelPredictions(
            tuple(cands), self.executions, fit.noise_sigma, self.draws, QUANTILES, res.evaluations, res.exhaustive, note
        )
