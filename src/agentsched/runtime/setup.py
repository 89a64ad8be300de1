"""Building a runtime's parts from what its caller gave: the workflow, the policy (in cold start
when a task has no card), and the check that the simulator is not handed placeholder cards."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError, PolicyError, TestbedError
from agentsched.model.workflow import Workflow
from agentsched.policies.base import Policy
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.real import NO_CUDA_NOTE, host_only_workflow
from agentsched.testbeds.spec import TestbedSpec

log = logging.getLogger("agentsched.runtime")

# policies that schedule without profile cards (names, tags, workload lines, or measurements only)
COLD_CAPABLE = ("agent-plan", "agent-plan-cold", "agent-rules", "agent-rules-cold", "agent-llm", "all-gpu", "ucb1")
_START_COLD = ("agent-plan", "agent-rules", "agent-llm")  # run in cold start when a task has no card


def build_workflow(workflow: Workflow | str | Path, cards: str | None) -> Workflow:
    from agentsched.scenarios import resolve_workflow

    wf = workflow if isinstance(workflow, Workflow) else resolve_workflow(workflow)
    if cards:
        wf = wf.with_cards(cards)
    return wf


def build_policy(policy: str | Policy, wf: Workflow, options: dict[str, Any] | None) -> Policy:
    if isinstance(policy, Policy):
        return policy
    from agentsched.loop.registry import default_policy, get_spec, make_policy

    name = default_policy(wf) if policy is None else get_spec(policy).name.value
    if name == "oracle":
        raise PolicyError("policy oracle is an offline reference: a runtime needs an online policy")
    return make_policy(name, **cold_start_options(name, wf, options))


def cold_start_options(name: str, wf: Workflow, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Policy ``name``'s options for ``wf``: unchanged when every task has a card; else a policy that
    needs cards is refused in one line, and an agent runs in cold start (``start`` warm refused). The
    one rule for ``invoke``, ``serve`` and ``run``, so that none shows an agent placeholder cards as
    if profiled (cpu 1 ms, 0 MB) or runs a card-based policy on them."""
    opts = dict(options or {})
    if wf.unprofiled:
        tasks = ", ".join(sorted(wf.unprofiled))
        if name not in COLD_CAPABLE:
            raise PolicyError(
                f"policy {name} needs profile cards, but task(s) {tasks} have none: profile the "
                f"tools (agentsched profile --tools ...) or use one of {', '.join(COLD_CAPABLE)}"
            )
        if name in _START_COLD and opts.get("start", "cold") != "cold":
            raise PolicyError(f"policy {name}: start warm needs cards, but task(s) {tasks} have none")
        if name in _START_COLD:
            opts["start"] = "cold"
            log.info("task(s) %s have no card: %s runs in cold start", tasks, name)
    return opts


SIM_ONLY_REMEDY = "name that card file in the workflow's `cards:` key (this command runs on the simulator only)"


def check_sim_cards(
    testbed: TestbedSpec | Testbed, wf: Workflow, remedy: str = "pass --cards cards.json, or use --testbed local"
) -> None:
    """Refuse the simulator for tasks without a card: it would time them from placeholder cards
    (cold start figures, not measurements) and print made-up E2Es as if they were real. ``remedy``:
    what the caller can do with the profiled cards (the options it has)."""
    from agentsched.testbeds.sim import SimTestbed

    simulated = isinstance(testbed, SimTestbed) or (isinstance(testbed, TestbedSpec) and testbed.simulated)
    if not wf.unprofiled or not simulated:
        return
    tasks = sorted(wf.unprofiled)
    tools = sorted({wf.tasks[t].tool for t in tasks})
    raise TestbedError(
        f"the sim testbed needs profiled cards for user tools, but task(s) {', '.join(tasks)} have "
        f"none (its times would be placeholders): profile them with `agentsched profile --tools "
        f"{','.join(tools)} --out cards.json` and {remedy}"
    )


def check_runtime_arguments(seed: Any, store: Any, policy_options: Any) -> None:
    """One-line errors naming the argument: a wrong type is neither a bare TypeError nor accepted."""
    from agentsched.store import Store

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise AgentschedError(f"seed must be an integer, got {seed!r}")
    if store is not None and not isinstance(store, (str, Path, Store)):
        raise AgentschedError(f"store must be a file path, a Store or None, got {type(store).__name__}")
    if policy_options is not None and not isinstance(policy_options, Mapping):
        raise AgentschedError(
            f"policy_options must be a mapping of option names to values, got {type(policy_options).__name__}"
        )


def check_round_settings(round_size: Any, explore_fraction: Any) -> None:
    """One-line errors for a round size outside [1, 1000] or an exploration share outside [0, 1]."""
    if isinstance(round_size, bool) or not isinstance(round_size, int) or not 1 <= round_size <= 1000:
        raise AgentschedError(f"round_size must be an integer in [1, 1000], got {round_size!r}")
    if (
        isinstance(explore_fraction, bool)
        or not isinstance(explore_fraction, (int, float))
        or not 0 <= explore_fraction <= 1
    ):
        raise AgentschedError(f"explore_fraction must be a number in [0, 1], got {explore_fraction!r}")


def host_only_where_needed(testbed: Testbed, workflow: Workflow) -> tuple[bool, Workflow]:
    """The workflow with the GPU figures stripped from the tasks whose GPU placements run as host
    code on ``testbed`` (every task without CUDA: then True), or can never run (no GPU holds their
    VRAM): the start rules and the policy's later predictions see them so (the policy itself was
    chosen from the real cards)."""
    if testbed.host_only(workflow):
        log.info(NO_CUDA_NOTE)
        return True, host_only_workflow(workflow)
    unfit = testbed.gpu_unfit(workflow)
    for why in unfit.values():
        log.warning("%s: it runs on the CPU", why)
    return False, (host_only_workflow(workflow, list(unfit)) if unfit else workflow)
