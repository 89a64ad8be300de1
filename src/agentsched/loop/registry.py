"""Every policy by name, and the one factory that builds them.

Entries name their class by module path so that a policy's module (and whatever it imports: an
LLM client, the agent) is imported only when that policy is chosen or its options are asked for.
A policy's options are its constructor's keyword parameters (read with ``inspect``; declared once,
in the constructor), less the ones its entry fixes or leaves out. ``make_policy`` raises a one-line
``PolicyError`` for an unknown name, an option the policy does not accept, or a policy whose module
cannot be imported.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from agentsched.errors import PolicyError
from agentsched.policies.base import Policy


class PolicyName(str, enum.Enum):
    """Registered policy names (registry order = report order)."""

    ALL_GPU = "all-gpu"
    HEFT = "heft"
    HEFT_CF = "heft-cf"
    UCB1 = "ucb1"
    STARPU = "starpu"
    MEM_GREEDY = "mem-greedy"
    ORACLE = "oracle"
    AGENT_RULES = "agent-rules"
    AGENT_RULES_COLD = "agent-rules-cold"  # agent-rules with --start cold, as its own row in reports
    AGENT_LLM = "agent-llm"
    AGENT_PLAN = "agent-plan"  # model-based planner
    AGENT_PLAN_COLD = "agent-plan-cold"  # agent-plan from names and tags only

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PolicySpec:
    """How to build one registered policy."""

    name: PolicyName  # registry name
    target: str  # "module:Class", imported on first use
    summary: str  # one line for --help and reports
    fixed: dict[str, Any] = field(default_factory=dict)  # keyword arguments always passed
    online: bool = True  # False: offline reference (the oracle)
    baseline: bool = True  # one of the paper's classical baselines (the bench default)
    # constructor parameters this entry does not offer (e.g. ``llm`` for the rules reasoner)
    without: frozenset[str] = frozenset()
    # parameters only a harness passes (an object, not a value a user can type): not listed, not settable
    internal: frozenset[str] = frozenset()

    @property
    def options(self) -> frozenset[str]:
        """The keyword options this entry accepts: its constructor's parameters, less ``fixed`` and
        ``without`` (empty when the class cannot be imported)."""
        try:
            return constructor_options(self.name.value)
        except PolicyError:
            return frozenset()

    @property
    def public_options(self) -> frozenset[str]:
        """The options a user may set (``agentsched policies``, ``--policy-option``)."""
        return self.options - self.internal


_NOT_FOR_RULES = frozenset({"llm", "predictions"})  # the LLM reasoner's options

REGISTRY: dict[str, PolicySpec] = {
    s.name.value: s
    for s in (
        PolicySpec(
            PolicyName.ALL_GPU,
            "agentsched.policies.all_gpu:AllGpuPolicy",
            "every GPU-capable tool on gpu_now (agent-framework default)",
        ),
        PolicySpec(
            PolicyName.HEFT,
            "agentsched.policies.heft:HeftPolicy",
            "HEFT list scheduling on isolated card costs (Topcuoglu et al. 2002)",
        ),
        PolicySpec(
            PolicyName.HEFT_CF,
            "agentsched.policies.heft_cf:HeftCfPolicy",
            "HEFT with GPU costs inflated by a static contention factor",
        ),
        PolicySpec(
            PolicyName.UCB1,
            "agentsched.policies.ucb1:Ucb1Policy",
            "UCB1 bandit over complete mappings (Auer et al. 2002)",
        ),
        PolicySpec(
            PolicyName.STARPU,
            "agentsched.policies.starpu:StarpuPolicy",
            "StarPU dmda-like greedy with online history models (Augonnet et al. 2009)",
        ),
        PolicySpec(
            PolicyName.MEM_GREEDY,
            "agentsched.policies.mem_greedy:MemGreedyPolicy",
            "gpu_now by GPU speedup until the VRAM budget is used, then CPU",
        ),
        PolicySpec(
            PolicyName.ORACLE,
            "agentsched.policies.oracle_ref:OracleRefPolicy",
            "brute-force best mapping (offline reference, not an online policy)",
            online=False,
            baseline=False,
            internal=frozenset({"oracle"}),
        ),
        PolicySpec(
            PolicyName.AGENT_RULES,
            "agentsched.agent.policy:AgentPolicy",
            "agentic scheduler, rule-based reasoner",
            fixed={"reasoner": "rules"},
            baseline=False,
            without=_NOT_FOR_RULES,
        ),
        PolicySpec(
            PolicyName.AGENT_RULES_COLD,
            "agentsched.agent.policy:AgentPolicy",
            "agent-rules in cold start (tool names, tags and workload lines; no cards)",
            fixed={"reasoner": "rules", "start": "cold"},
            baseline=False,
            without=_NOT_FOR_RULES,
        ),
        PolicySpec(
            PolicyName.AGENT_LLM,
            "agentsched.agent.policy:AgentPolicy",
            "agentic scheduler, LLM reasoner",
            fixed={"reasoner": "llm"},
            baseline=False,
        ),
        PolicySpec(
            PolicyName.AGENT_PLAN,
            "agentsched.planner.policy:PlanPolicy",
            "model-based planner: online contention model, predictor, search, probing by value",
            baseline=False,
        ),
        PolicySpec(
            PolicyName.AGENT_PLAN_COLD,
            "agentsched.planner.policy:PlanPolicy",
            "agent-plan in cold start (tool names and tags; no cards)",
            fixed={"start": "cold"},
            baseline=False,
        ),
    )
}


def list_policies() -> list[str]:
    """Registered names, in registry order."""
    return list(REGISTRY)


def baseline_policies() -> list[str]:
    """The paper's classical baselines (all-gpu, heft, heft-cf, ucb1, starpu, mem-greedy)."""
    return [n for n, s in REGISTRY.items() if s.baseline]


def default_policy(workflow: Any) -> str:
    """The policy a workflow runs under when none is named (run, invoke, Runtime, GraphRuntime):
    ``agent-plan`` where every task has a profile card, ``agent-plan-cold`` where some have none
    (user tools not profiled yet): the planner then starts from tool names and tags. Beyond the
    planner's task cap (``planner.search.MAX_PLAN_TASKS``, which it refuses) ``agent-rules``
    (``agent-rules-cold``) instead."""
    from agentsched.planner.search import MAX_PLAN_TASKS

    if len(workflow.tasks) > MAX_PLAN_TASKS:
        return (PolicyName.AGENT_RULES_COLD if workflow.unprofiled else PolicyName.AGENT_RULES).value
    return (PolicyName.AGENT_PLAN_COLD if workflow.unprofiled else PolicyName.AGENT_PLAN).value


def get_spec(name: str) -> PolicySpec:
    """The spec of ``name``; a one-line PolicyError listing the valid names otherwise."""
    spec = REGISTRY.get(str(name).strip().lower())
    if spec is None:
        raise PolicyError(f"unknown policy {name!r} (valid: {', '.join(REGISTRY)})")
    return spec


def accepts(name: str, option: str) -> bool:
    """True when policy ``name`` takes keyword ``option``."""
    return option in get_spec(name).options


def constructor_options(name: str) -> frozenset[str]:
    """Policy ``name``'s options, read from its constructor's signature: every parameter that can be
    given by keyword, less the entry's ``fixed`` and ``without`` ones. One-line PolicyError when the
    class cannot be imported."""
    spec = get_spec(name)
    cls = _load_class(spec)
    params = inspect.signature(cls.__init__).parameters.values()
    named = {
        p.name
        for p in params
        if p.name != "self" and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return frozenset(named - set(spec.fixed) - spec.without)


def option_defaults(name: str) -> dict[str, Any]:
    """Policy ``name``'s public options and their constructor defaults (None where there is none)."""
    spec = get_spec(name)
    params = inspect.signature(_load_class(spec).__init__).parameters
    return {
        o: (None if params[o].default is inspect.Parameter.empty else params[o].default)
        for o in sorted(spec.public_options)
    }


def _load_class(spec: PolicySpec) -> type[Policy]:
    module, _, attr = spec.target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise PolicyError(f"policy {spec.name.value} is unavailable: cannot import {spec.target} ({reason})") from None
    return cls


def is_available(name: str) -> bool:
    """True when the policy's module imports (the agent policies may not be installed yet)."""
    try:
        _load_class(get_spec(name))
    except PolicyError:
        return False
    return True


def make_policy(name: str, **options: Any) -> Policy:
    """Build policy ``name`` with ``options``; one-line PolicyError on any bad name or option."""
    spec = get_spec(name)
    pname = spec.name.value
    cls = _load_class(spec)  # an unavailable policy says so first, whatever its options
    accepted = constructor_options(pname)
    for key, value in options.items():
        if key in accepted:
            continue
        if key == "start":
            takers = ", ".join(n for n, s in REGISTRY.items() if "start" in s.options)
            raise PolicyError(f"policy {pname} has no {value} start (--start is for {takers})")
        if key == "llm":
            raise PolicyError(f"policy {pname} takes no LLM options (they are for agent-llm)")
        valid = ", ".join(sorted(accepted - spec.internal)) or "none"
        raise PolicyError(f"policy {pname} takes no option {key!r} (options: {valid})")
    try:
        policy = cls(**spec.fixed, **options)
    except TypeError as e:  # a constructor that disagrees with its spec: report, don't crash
        raise PolicyError(f"policy {pname}: {e}") from None
    return policy


# ---- deciders: per-invocation / per-ready-task decisions on a shared machine (model/live.Decider) ----


@dataclass(frozen=True)
class DeciderSpec:
    """How to build one registered decider (built like a policy: its options are its constructor's)."""

    name: str
    target: str  # "module:Class" (or a factory), imported on first use
    summary: str
    fixed: dict[str, Any] = field(default_factory=dict)  # keyword arguments always passed
    baseline: bool = True  # one of the load study's baselines (its capacity is theirs)
    admission: bool = False  # behind the generic admission rule (``policies/traffic/baselines.WithAdmission``)
    needs_oracle: bool = False  # built from each workflow's oracle mapping (``oracle=``)
    config: str | None = None  # "module:Model" of its tuned constants (its ``config=``): each field an option


_BASELINE_DECIDERS = (
    ("all-gpu", "agentsched.policies.traffic.baselines:AllGpu", "every GPU-capable task on gpu_now"),
    ("oracle-static", "agentsched.policies.traffic.baselines:oracle_static", "each workflow's isolated oracle mapping"),
    (
        "heft",
        "agentsched.policies.traffic.baselines:HeftStream",
        "HEFT's mapping of each workflow, planned at admission",
    ),
    ("dmda", "agentsched.policies.traffic.baselines:Dmda", "StarPU dmda: the earliest predicted finish, when ready"),
    ("least-loaded", "agentsched.policies.traffic.baselines:LeastLoaded", "the least loaded device, when ready"),
)
_TRAFFIC_AWARE = "agentsched.planner.traffic:TrafficPlanner"
_TRAFFIC_CONFIG = "agentsched.planner.traffic_config:TrafficConfig"
_DECIDER_INTERNAL = frozenset({"mappings", "learned", "ratios", "config"})  # objects a harness passes

DECIDERS: dict[str, DeciderSpec] = {
    s.name: s
    for s in (
        DeciderSpec(
            "traffic-aware",
            _TRAFFIC_AWARE,
            "places each task when ready from the machine's traffic and learned contention; admission at the door",
            {"admission": True},
            baseline=False,
            config=_TRAFFIC_CONFIG,
        ),
        DeciderSpec(
            "traffic-aware-noadm",
            _TRAFFIC_AWARE,
            "traffic-aware without its admission",
            {"admission": False},
            baseline=False,
            config=_TRAFFIC_CONFIG,
        ),
        *(DeciderSpec(n, t, s, needs_oracle=n == "oracle-static") for n, t, s in _BASELINE_DECIDERS),
        *(
            DeciderSpec(
                f"{n}+adm",
                t,
                f"{s}, behind the generic admission rule",
                admission=True,
                needs_oracle=n == "oracle-static",
            )
            for n, t, s in _BASELINE_DECIDERS
        ),
    )
}
# names kept for command lines written before the rename (the load-aware decider was named after the package)
DECIDER_ALIASES = {"agentsched": "traffic-aware", "agentsched-noadm": "traffic-aware-noadm"}


def decider_name(name: str) -> str:
    """The registered name of decider ``name`` (an alias resolved); one-line PolicyError otherwise."""
    key = DECIDER_ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in DECIDERS:
        raise PolicyError(f"unknown decider {name!r} (valid: {', '.join(DECIDERS)})")
    return key


def _import(target: str, what: str) -> Any:
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise PolicyError(f"decider {what} is unavailable: cannot import {target} ({e})") from None


def decider_options(name: str) -> dict[str, Any]:
    """Decider ``name``'s options a user may set and their defaults: its constructor's plain
    parameters and each field of its tuned constants' config."""
    spec = DECIDERS[decider_name(name)]
    params = inspect.signature(_import(spec.target, spec.name)).parameters
    out = {p: v.default for p, v in params.items() if p not in _DECIDER_INTERNAL | set(spec.fixed)}
    if spec.config is not None:
        out.update({k: f.default for k, f in _import(spec.config, spec.name).model_fields.items()})
    return out


def decider_by_name(name: str, *, oracle: Any = None, **options: Any) -> Any:
    """Build decider ``name`` (``DECIDERS``, an alias accepted) with ``options``: its constructor's
    keyword parameters, and the fields of its tuned constants' config (``config=`` whole, or field by
    field: ``hold_margin=0.5``); ``oracle``: each workflow's oracle mapping, for ``oracle-static``. A
    one-line PolicyError for an unknown name or option, or an oracle decider without ``oracle``; an
    invalid config value is the config's own validation error."""
    spec = DECIDERS[decider_name(name)]
    make = _import(spec.target, spec.name)
    if spec.needs_oracle:
        if oracle is None:
            raise PolicyError(f"decider {spec.name} needs each workflow's oracle mapping")
        options = {"mappings": oracle, **options}
    if spec.config is not None:
        fields = set(_import(spec.config, spec.name).model_fields)
        tuned = {k: options.pop(k) for k in list(options) if k in fields}
        if tuned:
            options["config"] = {**dict(options.get("config") or {}), **tuned}
    accepted = {p for p in inspect.signature(make).parameters if p != "self"} - set(spec.fixed)
    unknown = sorted(set(options) - accepted)
    if unknown:
        valid = ", ".join(sorted(decider_options(spec.name))) or "none"
        raise PolicyError(f"decider {spec.name} takes no option {unknown[0]!r} (options: {valid})")
    decider = make(**spec.fixed, **options)
    if spec.admission:
        from agentsched.policies.traffic.baselines import WithAdmission

        decider = WithAdmission(decider)
    return decider
