"""Monitor switches (the paper's Table 6 ablation) and probe budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from agentsched.errors import PolicyError

_NULLABLE = frozenset({"probe_budget", "max_probes_per_round"})  # options where None means unlimited


@dataclass(frozen=True)
class MonitorConfig:
    """What the runtime monitor may do. Every mechanism can be switched off for the ablation."""

    enabled: bool = True  # False: history only, no averages, probes or hints ("LLM only, no monitor")
    running_averages: bool = True  # Factor A: windowed per-(tool, mode) latency averages
    reprobe: bool = True  # single-tool what-if reprobes around a mapping that changed
    cpu_to_queue_reprobe: bool = True  # include cpu -> gpu_queue among the reprobes
    swap_reprobe: bool = True  # swaps after an infeasible gpu_now reprobe
    hints: bool = True  # exploration hints on a stagnant mapping
    confirm: bool = True  # on stagnation, re-measure what-ifs that came close to the best
    progressive: bool = True  # activate mechanisms only once their factor is detected
    window: int = 5  # sliding-window length of the per-(tool, mode) latency averages
    probe_budget: int | None = 120  # probe executions allowed in one run (None: unlimited)
    max_probes_per_round: int | None = 24  # probe executions allowed after one round (None: unlimited)
    stagnation_rounds: int = 2  # identical consecutive round mappings that count as stagnant
    contention_slowdown: float = 0.10  # warm start: measured GPU latency this far above the card = Factor A
    pressure_fraction: float = 0.8  # peak VRAM at this share of the budget (or an OOM) = Factor B
    confirm_margin: float = 0.03  # what-ifs within this fraction above the best are re-measured on stagnation
    confirm_samples: int = 3  # re-measure a close what-if until it has this many samples
    confirm_top: int = 3  # at most this many close what-ifs are re-measured per stagnant mapping

    def __post_init__(self) -> None:
        if self.window < 1:
            raise PolicyError(f"monitor window must be >= 1, got {self.window}")
        if self.stagnation_rounds < 2:
            raise PolicyError(f"monitor stagnation_rounds must be >= 2, got {self.stagnation_rounds}")
        for name in ("probe_budget", "max_probes_per_round"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise PolicyError(f"monitor {name} must be >= 0 or None, got {v}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | MonitorConfig | None) -> MonitorConfig:
        """From the registry's ``monitor`` option dict; unknown keys are a one-line PolicyError."""
        if options is None:
            return cls()
        if isinstance(options, MonitorConfig):
            return options
        if not isinstance(options, Mapping):
            raise PolicyError(f"monitor options must be a mapping, got {type(options).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise PolicyError(f"unknown monitor option(s) {', '.join(unknown)} (valid: {', '.join(known)})")
        out: dict[str, Any] = {}
        for k, v in options.items():
            default = getattr(cls(), k)
            if isinstance(default, bool):
                if not isinstance(v, bool):
                    raise PolicyError(f"monitor option {k} must be true or false, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                if not (v is None and k in _NULLABLE):
                    raise PolicyError(f"monitor option {k} must be a number, got {v!r}")
            out[k] = v
        return replace(cls(), **out)

    def differences(self) -> dict[str, Any]:
        """Options that differ from the defaults (for labels and reports)."""
        base = MonitorConfig()
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(base, f.name)}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
