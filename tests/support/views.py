"""Views built by hand for the agent tests, and readers of mappings written in prompts."""

from __future__ import annotations

import random
import re

from agentsched.agent.policy import AgentPolicy
from agentsched.agent.view import AgentView
from agentsched.model.workflow import Mode, Workflow
from agentsched.policies.base import PolicyContext

_MODE = r'"?(cpu|gpu_now|gpu_queue|gpu)"?'


def round0_view(wf: Workflow, start: str = "warm", rounds: int | None = 20) -> AgentView:
    """The view before round 0 (nothing executed)."""

    def no_probe(_m):
        raise AssertionError("round 0 needs no probe")

    policy = AgentPolicy("rules", start=start)
    policy.reset(
        PolicyContext(
            workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe, rounds=rounds, repeats=1
        )
    )
    return policy.view(0)


def complete_mappings(text: str, tasks: list[str]) -> list[dict[str, str]]:
    """Every complete mapping written in ``text`` (``A=gpu,B=cpu,...`` or JSON ``"A": "gpu", ...``)."""
    found = []
    sep = r"\s*[,;]?\s*"
    for style in (r"{t}\s*=\s*" + _MODE, r'"{t}"\s*:\s*' + _MODE):
        pattern = sep.join(style.format(t=re.escape(t)) for t in tasks)
        for m in re.finditer(pattern, text):
            found.append(dict(zip(tasks, (g.replace("gpu_now", "gpu") for g in m.groups()), strict=True)))
    return found


def as_labels(mapping: dict[str, Mode]) -> dict[str, str]:
    return {t: ("gpu" if m is Mode.GPU_NOW else m.value) for t, m in mapping.items()}
