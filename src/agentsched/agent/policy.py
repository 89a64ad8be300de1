"""The agentic scheduler as a loop policy: a reasoner (``rules``, or ``llm`` with the rules as its
per-round fallback) over the four evidence streams, and the runtime monitor that turns each round's
consequences into evidence.

Constructed by the policy registry as ``AgentPolicy(reasoner="rules"|"llm", **options)`` with
options ``start`` ("warm"|"cold"), ``llm`` (dict: base_url, model, api_key, temperature,
timeout_s, ...; environment variables fill gaps), ``monitor`` (dict of ``MonitorConfig`` switches
and the probe budget) and ``stability`` (the adoption threshold, a fraction).
"""

from __future__ import annotations

from typing import Any

from agentsched.agent.reasoner import FallbackReasoner, Reasoner
from agentsched.agent.rules import RulesReasoner
from agentsched.agent.view import AgentView, Measured, ToolView
from agentsched.errors import PolicyError
from agentsched.model.mapping import format_mapping
from agentsched.model.workflow import Workflow
from agentsched.monitor.config import MonitorConfig
from agentsched.monitor.monitor import RuntimeMonitor
from agentsched.monitor.records import Evidence
from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult

REASONERS = ("rules", "llm")
STARTS = ("warm", "cold")
INITIALS = ("rules", "all-gpu")  # round-0 choice of the rules reasoner
DEFAULT_STABILITY = 0.02  # adopt a what-if only if it beats the best by more than 2%

# short names of switched-off mechanisms, for labels that tell ablation variants apart
_SWITCH_LABELS = {
    "enabled": "no-monitor", "running_averages": "no-avg", "reprobe": "no-reprobe",
    "cpu_to_queue_reprobe": "no-cpu2queue", "swap_reprobe": "no-swap", "hints": "no-hints",
    "confirm": "no-confirm", "progressive": "all-on",
}


class AgentPolicy(Policy):
    """Agentic scheduler: reasoner + runtime monitor."""

    name = "agent"
    online = True

    def __init__(self, reasoner: str = "rules", **options: Any) -> None:
        if reasoner not in REASONERS:
            raise PolicyError(f"unknown agent reasoner {reasoner!r} (valid: {', '.join(REASONERS)})")
        known = {"start", "llm", "monitor", "stability", "initial"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise PolicyError(f"unknown option(s) for agent-{reasoner}: {', '.join(unknown)} "
                              f"(valid: {', '.join(sorted(known))})")
        start = options.get("start") or "warm"
        if start not in STARTS:
            raise PolicyError(f"agent start must be warm or cold, got {start!r}")
        stability = options.get("stability", DEFAULT_STABILITY)
        if isinstance(stability, bool) or not isinstance(stability, (int, float)) or not 0 <= stability < 1:
            raise PolicyError(f"agent stability must be a fraction in [0, 1), got {stability!r}")
        initial = options.get("initial") or "rules"
        if initial not in INITIALS:
            raise PolicyError(f"agent initial must be one of {', '.join(INITIALS)}, got {initial!r}")
        self.initial = initial  # round 0: "rules" (the written rules) or "all-gpu" (no prior, for ablations)
        self.reasoner_name = reasoner  # "rules" or "llm"
        self.start = start  # "warm": profile cards; "cold": names, tags and workload lines only
        self.stability = float(stability)  # adoption threshold for what-ifs
        self.monitor_config = MonitorConfig.from_options(options.get("monitor"))
        if reasoner != "llm" and options.get("llm"):
            raise PolicyError("llm options are only valid with the llm reasoner (agent-llm)")
        self.reasoner: Reasoner = RulesReasoner(initial=initial)
        if reasoner == "llm":
            from agentsched.agent.llm import LLMConfig, LLMReasoner

            # an unusable answer in a round: the rules decide that round, on the same view
            self.reasoner = FallbackReasoner(LLMReasoner(LLMConfig.from_options(options.get("llm"))), self.reasoner)
        self.monitor: RuntimeMonitor | None = None
        self._evidence: Evidence | None = None

    @property
    def label(self) -> str:
        base = f"agent-{self.reasoner.label}"
        if self.start == "cold":
            base += "-cold"
        off = [_SWITCH_LABELS.get(k, f"{k}={v}") for k, v in self.monitor_config.differences().items()
               if k in _SWITCH_LABELS]
        if not self.monitor_config.enabled:
            off = ["no-monitor"]
        if self.initial != "rules":
            off.append(f"r0={self.initial}")
        return base + (f"[{','.join(off)}]" if off else "")

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        cards = ctx.cards if self.start == "warm" else None
        self.monitor = RuntimeMonitor(ctx.workflow, ctx.probe, self.monitor_config, cards=cards,
                                      probe_allowed=ctx.probe_allowed)
        self.reasoner.reset()
        self._evidence = None

    def preflight(self, workflow: Workflow) -> None:
        """The reasoner's check (one cheap request to an LLM endpoint; nothing for the rules)."""
        self.reasoner.preflight()

    def close(self) -> None:
        """Release the reasoner's resources (a local model server)."""
        self.reasoner.close()

    def describe(self) -> dict[str, Any]:
        """Label, start and the reasoner's settings (an LLM's model and redacted base URL)."""
        return {**super().describe(), "start": self.start, "initial": self.initial,
                "reasoner": self.reasoner.describe()}

    def view(self, round_index: int) -> AgentView:
        """The four streams as they stand before ``round_index``."""
        ctx = self.ctx
        assert self.monitor is not None
        warm = self.start == "warm"
        tools = {
            t: ToolView(t, c.name, c.workload, tuple(c.tags), c if warm else None)
            for t, c in ctx.cards.items()
        }
        measured = tuple(Measured(m, mean, n, was_round) for m, mean, n, was_round in self.monitor.measured_mappings())
        return AgentView(
            workflow=ctx.workflow, start=self.start, tools=tools, round=round_index, rounds=ctx.rounds,
            history=tuple(self.monitor.history), best=self.monitor.best(), evidence=self._evidence,
            measured=measured, observed_vram_mb=dict(self.monitor.observed_vram_mb),
            monitor_enabled=self.monitor_config.enabled, stability=self.stability,
        )

    def propose(self, round_index: int) -> Proposal:
        view = self.view(round_index)
        d = self.reasoner.propose(view)
        return Proposal(d.mapping, {**d.audit, "reason": d.reason,
                                    "mapping": format_mapping(view.workflow, d.mapping)})

    def observe(self, result: RoundResult) -> dict[str, Any]:
        assert self.monitor is not None
        self._evidence = self.monitor.observe(result)
        return self._evidence.to_dict()
