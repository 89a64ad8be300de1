"""The agentic scheduler as a loop policy: a reasoner (``rules``, or ``llm`` with the rules as its
per-round fallback) over the four evidence streams, and the runtime monitor that turns each round's
consequences into evidence.

Constructed by the policy registry as ``AgentPolicy(reasoner="rules"|"llm", **options)`` with
options ``start`` ("warm"|"cold"), ``llm`` (an ``LLMConfig``, or a dict of its fields: base_url,
model, api_key, temperature, timeout_s, ...; environment variables fill gaps), ``monitor`` (dict of ``MonitorConfig`` switches
and the probe budget), ``stability`` (the adoption threshold, a fraction) and ``predictions``
(bool, default False: the fifth stream, the agent-plan planner's top candidates with predicted E2E,
peak VRAM and a range, fitted to every execution the agent sees; ``agent/forecast.py``; only
the LLM's prompt renders it, the rules reasoner ignores it).

Under a stream's load (other invocations sharing the machine), ``watch_load(live)`` gives every
later view the sixth stream, the load at decision time (``LoadEvidence``: GPU tasks running and
their expected remaining time, VRAM in use, GPU queue, CPU slots busy); ``watch_load(None)`` stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentsched.agent.reasoner import FallbackReasoner, Reasoner
from agentsched.agent.rules import RulesReasoner
from agentsched.agent.view import AgentView, LoadEvidence, Measured, ToolView
from agentsched.errors import PolicyError
from agentsched.model.execution import Execution
from agentsched.model.live import MachineSnapshot
from agentsched.model.mapping import MappingT, format_mapping
from agentsched.model.options import INITIALS, STARTS, InitialRule, StartKind
from agentsched.model.workflow import Workflow
from agentsched.monitor.config import MonitorConfig
from agentsched.monitor.monitor import RuntimeMonitor
from agentsched.monitor.records import Evidence
from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult

if TYPE_CHECKING:
    from agentsched.agent.llm import LLMConfig

REASONERS = ("rules", "llm")
DEFAULT_STABILITY = 0.02  # adopt a what-if only if it beats the best by more than 2%

# short names of switched-off mechanisms, for labels that tell ablation variants apart
_SWITCH_LABELS = {
    "enabled": "no-monitor",
    "running_averages": "no-avg",
    "reprobe": "no-reprobe",
    "cpu_to_queue_reprobe": "no-cpu2queue",
    "swap_reprobe": "no-swap",
    "hints": "no-hints",
    "confirm": "no-confirm",
    "progressive": "all-on",
}


class AgentPolicy(Policy):
    """Agentic scheduler: reasoner + runtime monitor."""

    name = "agent"
    online = True

    def __init__(
        self,
        reasoner: str = "rules",
        *,
        start: StartKind | str | None = StartKind.WARM,
        llm: LLMConfig | Mapping[str, Any] | None = None,
        monitor: Mapping[str, Any] | None = None,
        stability: float = DEFAULT_STABILITY,
        initial: InitialRule | str | None = InitialRule.RULES,
        predictions: bool = False,
    ) -> None:
        if reasoner not in REASONERS:
            raise PolicyError(f"unknown agent reasoner {reasoner!r} (valid: {', '.join(REASONERS)})")
        start = str(start or StartKind.WARM)
        if start not in STARTS:
            raise PolicyError(f"agent start must be warm or cold, got {start!r}")
        if isinstance(stability, bool) or not isinstance(stability, (int, float)) or not 0 <= stability < 1:
            raise PolicyError(f"agent stability must be a fraction in [0, 1), got {stability!r}")
        initial = str(initial or InitialRule.RULES)
        if initial not in INITIALS:
            raise PolicyError(f"agent initial must be one of {', '.join(INITIALS)}, got {initial!r}")
        if not isinstance(predictions, bool):
            raise PolicyError(f"agent predictions must be true or false, got {predictions!r}")
        self.predictions = predictions  # the fifth stream (model predictions) in the view
        self.initial = initial  # round 0: "rules" (the written rules) or "all-gpu" (no prior, for ablations)
        self.reasoner_name = reasoner  # "rules" or "llm"
        self.start = start  # "warm": profile cards; "cold": names, tags and workload lines only
        self.stability = float(stability)  # adoption threshold for what-ifs
        self.monitor_config = MonitorConfig.from_options(monitor)
        if reasoner != "llm" and llm:
            raise PolicyError("llm options are only valid with the llm reasoner (agent-llm)")
        if llm is not None and not isinstance(llm, Mapping) and type(llm).__name__ != "LLMConfig":
            # (the value is not quoted: a URL or a key given where the mapping goes may be a secret)
            raise PolicyError(
                "agent llm options must be a mapping of LLM settings (base_url, model, api_key, ...), "
                f"got {'text, not a JSON object' if isinstance(llm, str) else 'a ' + type(llm).__name__}"
            )
        self.reasoner: Reasoner = RulesReasoner(initial=initial)
        if reasoner == "llm":
            from agentsched.agent.llm import LLMConfig, LLMReasoner

            # an unusable answer in a round: the rules decide that round, on the same view
            config = llm if isinstance(llm, LLMConfig) else LLMConfig.from_options(llm)
            self.reasoner = FallbackReasoner(LLMReasoner(config), self.reasoner)
            self.reproducible = False  # a model answers anew each time: a replay takes its stored answers
        self.monitor: RuntimeMonitor | None = None
        self._evidence: Evidence | None = None
        self.forecaster = None  # the planner fed by this agent's executions (predictions on), per run
        self.live: MachineSnapshot | None = None  # the stream's live state when deciding under load (watch_load)
        if predictions:
            from agentsched.agent.forecast import Forecaster

            self.forecaster = Forecaster(start)

    @property
    def label(self) -> str:
        base = f"agent-{self.reasoner.label}"
        if self.start == "cold":
            base += "-cold"
        off = [
            _SWITCH_LABELS.get(k, f"{k}={v}")
            for k, v in self.monitor_config.differences().items()
            if k in _SWITCH_LABELS
        ]
        if not self.monitor_config.enabled:
            off = ["no-monitor"]
        if self.initial != "rules":
            off.append(f"r0={self.initial}")
        if self.predictions:
            off.append("predictions")
        return base + (f"[{','.join(off)}]" if off else "")

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        cards = ctx.cards if self.start == "warm" else None
        probe = ctx.probe
        if self.forecaster is not None:
            self.forecaster.reset(ctx)
            probe = self._observed_probe(ctx.probe)
        self.monitor = RuntimeMonitor(
            ctx.workflow, probe, self.monitor_config, cards=cards, probe_allowed=ctx.probe_allowed
        )
        self.reasoner.reset()
        self._evidence = None

    def watch_load(self, live: MachineSnapshot | None) -> None:
        """Show the load of ``live`` (a stream's live state) in every later view; None: no load stream."""
        self.live = live

    def _observed_probe(self, probe: Callable[[MappingT], Execution]) -> Callable[[MappingT], Execution]:
        """``probe`` that also feeds each monitor probe's execution to the prediction model."""

        def run(mapping: MappingT) -> Execution:
            x = probe(mapping)
            assert self.forecaster is not None
            self.forecaster.record(x)
            return x

        return run

    def check_workflow(self, workflow: Workflow) -> None:
        """With predictions on, that the planner's model takes on a workflow this large."""
        if self.forecaster is not None:
            self.forecaster.check(workflow)

    def preflight(self, workflow: Workflow) -> None:
        """``check_workflow``, then the reasoner's check (one cheap request to an LLM endpoint; nothing
        for the rules)."""
        super().preflight(workflow)
        self.reasoner.preflight()

    def close(self) -> None:
        """Release the reasoner's resources (a local model server)."""
        self.reasoner.close()

    def describe(self) -> dict[str, Any]:
        """Label, start and the reasoner's settings (an LLM's model and redacted base URL)."""
        out = {**super().describe(), "start": self.start, "initial": self.initial, "reasoner": self.reasoner.describe()}
        if self.predictions:  # only when on: recorded runs without the stream keep their records
            out["predictions"] = True
        return out

    def view(self, round_index: int) -> AgentView:
        """The four streams (five with predictions on) as they stand before ``round_index``."""
        ctx = self.ctx
        assert self.monitor is not None
        warm = self.start == "warm"
        tools = {t: ToolView(t, c.name, c.workload, tuple(c.tags), c if warm else None) for t, c in ctx.cards.items()}
        measured = tuple(Measured(m, mean, n, was_round) for m, mean, n, was_round in self.monitor.measured_mappings())
        return AgentView(
            workflow=ctx.workflow,
            start=self.start,
            tools=tools,
            round=round_index,
            rounds=ctx.rounds,
            history=tuple(self.monitor.history),
            best=self.monitor.best(),
            evidence=self._evidence,
            measured=measured,
            observed_vram_mb=dict(self.monitor.observed_vram_mb),
            monitor_enabled=self.monitor_config.enabled,
            stability=self.stability,
            predictions=None if self.forecaster is None else self.forecaster.predictions(),
            load=None if self.live is None else LoadEvidence.from_live(self.live),
        )

    def propose(self, round_index: int) -> Proposal:
        view = self.view(round_index)
        d = self.reasoner.propose(view)
        info = {**d.audit, "reason": d.reason, "mapping": format_mapping(view.workflow, d.mapping)}
        if view.predictions is not None:  # what the fifth stream showed, in every reasoner's audit
            info["predictions"] = [
                {
                    "mapping": format_mapping(view.workflow, c.mapping),
                    "predicted_e2e_ms": round(c.e2e_ms, 3),
                    "range_ms": [round(c.e2e_low_ms, 3), round(c.e2e_high_ms, 3)],
                    "peak_vram_mb": round(c.peak_vram_mb, 3),
                }
                for c in view.predictions.candidates
            ]
        return Proposal(d.mapping, info)

    def observe(self, result: RoundResult) -> dict[str, Any]:
        assert self.monitor is not None
        if self.forecaster is not None and result.judged:  # the round's runs first; the probes as they run
            for x in result.executions:
                self.forecaster.record(x, result.counts_against(x))
        self._evidence = self.monitor.observe(result)
        return self._evidence.to_dict()
