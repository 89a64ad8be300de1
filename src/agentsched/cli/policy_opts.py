"""How the command line becomes policy options: --start, --llm-*, --heft-model, --cpu-slots and
--policy-option KEY=VALUE, turned into one ``make_policy`` keyword dict per chosen policy.

Each option is checked once, where it lives: a key against the registry (the policy's
constructor signature), a value by the policy's constructor, the LLM settings by ``LLMConfig``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentsched.cli.options import LLM_FLAGS
from agentsched.errors import AgentschedError


@dataclass(frozen=True)
class PolicyFlags:
    """The policy-related flags of one command (None / empty: not given)."""

    start: str | None = None  # --start
    llm: dict[str, Any] = field(default_factory=dict)  # the --llm-* values given, keyed by LLMConfig field
    predictions: bool | None = None  # --llm-predictions / --no-llm-predictions
    heft_model: str | None = None  # --heft-model
    cpu_slots: int | None = None  # --cpu-slots: the cores static schedulers plan
    items: tuple[str, ...] = ()  # --policy-option KEY=VALUE / POLICY.KEY=VALUE, in order


def llm_given(
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    temperature: float | None = None,
    timeout_s: float | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The --llm-* values that were given, keyed by ``LLMConfig`` field."""
    given = {
        "base_url": base_url,
        "model": model,
        "api_key": api_key,
        "temperature": temperature,
        "timeout_s": timeout_s,
        "max_tokens": max_tokens,
    }
    return {k: v for k, v in given.items() if v is not None}


def flags_apply(llm: dict[str, Any]) -> str:
    """'--llm-model applies' / '--llm-model, --llm-timeout apply' for the given LLM options."""
    flags = [LLM_FLAGS[k] for k in llm]
    return f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'}"


def parse_value(text: str) -> Any:
    """A --policy-option value: JSON when it reads as JSON (3, 0.5, true, {"hints": false}), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_item(item: str) -> tuple[str | None, str, Any]:
    """``KEY=VALUE`` or ``POLICY.KEY=VALUE`` -> (policy or None, key, value); one-line error otherwise."""
    name, eq, text = item.partition("=")
    name = name.strip()
    if not eq or not name or not text.strip():
        raise AgentschedError(f"--policy-option {item!r} is not KEY=VALUE")
    target, dot, key = name.rpartition(".")
    if dot and not (target.strip() and key.strip()):  # '.KEY=1', 'POLICY.=1': a half-written prefix
        raise AgentschedError(f"--policy-option {item!r} is not POLICY.KEY=VALUE")
    return (target.strip().lower() if dot else None), key.strip(), parse_value(text.strip())


def _options_text(policy: str) -> str:
    from agentsched.loop.registry import get_spec

    return ", ".join(sorted(get_spec(policy).public_options)) or "none"


def _apply_items(
    policies: list[str], items: tuple[str, ...], options: dict[str, dict[str, Any]], flagged: dict[str, str]
) -> None:
    """--policy-option items into ``options`` (policy -> kwargs); ``flagged``: key -> the flag that set it."""
    from agentsched.loop.registry import REGISTRY, get_spec

    given: dict[tuple[str, str], str] = {}  # (policy, key) -> the item that set it
    for item in items:
        target, key, value = parse_item(item)
        if target is not None:
            if target not in REGISTRY:  # e.g. 'monitor.hints=false': the prefix names a policy, not a nesting
                raise AgentschedError(
                    f"--policy-option {item}: {target} is not a policy (POLICY.KEY=VALUE names "
                    f"one of the chosen policies: {', '.join(policies)})"
                )
            name = get_spec(target).name.value
            if name not in policies:
                raise AgentschedError(
                    f"--policy-option {item}: policy {name} is not among the chosen policies ({', '.join(policies)})"
                )
            takers = [name]
        else:
            takers = [p for p in policies if key in get_spec(p).public_options]
        if not takers or key not in get_spec(takers[0]).public_options:
            valid = "; ".join(f"{p}: {_options_text(p)}" for p in (takers or policies))
            named = key if target is None else f"{target}.{key}"  # the item as given, not another one's key
            raise AgentschedError(f"--policy-option {named}: no such option (valid: {valid})")
        if key in flagged:
            raise AgentschedError(f"--policy-option {key}: {flagged[key]} sets it too; give it once")
        for p in takers:
            if (p, key) in given:  # else the later item would silently replace the earlier one
                raise AgentschedError(
                    f"--policy-option {item}: {key} of {p} is set by {given[(p, key)]} too; give it once"
                )
            given[(p, key)] = item
            options.setdefault(p, {})[key] = value


def _llm_item(flags: PolicyFlags) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The LLM settings of the --llm-* flags and of a ``-O llm={...}`` beside them, each field given
    once, and the items left. Why merged, not replaced: the flags replacing that mapping whole would
    drop a ``base_url`` given in it, and report it missing."""
    mine = [item for item in flags.items if _is_llm_item(item)]
    if not flags.llm or not mine:
        return dict(flags.llm), flags.items
    if len(mine) > 1:
        raise AgentschedError(f"--policy-option {mine[1]}: llm of agent-llm is set by {mine[0]} too; give it once")
    value = parse_item(mine[0])[2]
    both = sorted(set(value) & set(flags.llm))
    if both:
        raise AgentschedError(
            f"--policy-option {mine[0]}: llm {both[0]} is given by {LLM_FLAGS[both[0]]} too; give it once"
        )
    return {**value, **flags.llm}, tuple(item for item in flags.items if item not in mine)


def _is_llm_item(item: str) -> bool:
    """Is ``item`` a mapping of LLM settings for agent-llm (``llm={...}``, ``agent-llm.llm={...}``)?"""
    target, key, value = parse_item(item)
    return key == "llm" and target in (None, "agent-llm") and isinstance(value, dict)


def _llm_options(
    policies: list[str], flags: PolicyFlags, single: bool, options: dict[str, dict[str, Any]]
) -> tuple[str, ...]:
    """--llm-* (an ``LLMConfig``, built and checked once here, with a ``-O llm={...}`` beside them:
    ``_llm_item``) and --llm-predictions for agent-llm; returns the --policy-option items left."""
    where = f"to --policy agent-llm (got {policies[0]})" if single else "when agent-llm is among --policies"
    if flags.llm and "agent-llm" not in policies:
        raise AgentschedError(f"{flags_apply(flags.llm)} only {where}")
    if flags.predictions is not None and "agent-llm" not in policies:
        raise AgentschedError(f"--llm-predictions applies only {where}")
    given, items = _llm_item(flags)
    if flags.llm:
        from agentsched.agent.llm import LLMConfig

        names = {k: v for k, v in LLM_FLAGS.items() if k in flags.llm}  # the rest came from -O llm=
        options.setdefault("agent-llm", {})["llm"] = LLMConfig.from_options(given, names=names)
    if flags.predictions:  # off is the default: left out, so the policy is the plain agent-llm
        options.setdefault("agent-llm", {})["predictions"] = True
    return items


def policy_options(policies: list[str], flags: PolicyFlags, *, single: bool = False) -> dict[str, dict[str, Any]]:
    """``make_policy`` keyword options for each of ``policies`` (registry names) from the flags.
    ``single``: one policy chosen with --policy (run, invoke): a flag it cannot take is its error."""
    from agentsched.loop.registry import accepts

    options: dict[str, dict[str, Any]] = {}
    flagged: dict[str, str] = {}
    if flags.start is not None:
        takers = policies if single else [p for p in policies if accepts(p, "start")]
        if not takers:
            raise AgentschedError(
                f"--start {flags.start}: none of the chosen policies has a start option "
                "(agent-rules, agent-llm, agent-plan do)"
            )
        for p in takers:  # make_policy refuses it in one line for a single policy without a start
            options.setdefault(p, {})["start"] = flags.start
        flagged["start"] = "--start"
    items = _llm_options(policies, flags, single, options)
    if flags.llm:
        flagged["llm"] = flags_apply(flags.llm).rsplit(" ", 1)[0]
    if flags.predictions is not None:
        flagged["predictions"] = "--llm-predictions"
    if flags.heft_model is not None:
        takers = [p for p in policies if accepts(p, "machine")]
        if not takers:
            raise AgentschedError(f"--heft-model applies only to heft and heft-cf (got {', '.join(policies)})")
        for p in takers:
            options.setdefault(p, {})["machine"] = flags.heft_model
        flagged["machine"] = "--heft-model"
    if flags.cpu_slots is not None:  # static schedulers plan as many CPU cores as the testbed has
        for p in policies:
            if accepts(p, "cpu_cores"):
                options.setdefault(p, {})["cpu_cores"] = flags.cpu_slots
    _apply_items(policies, items, options, flagged)  # explicit values win over derived ones
    return options
