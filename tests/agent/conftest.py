"""Shared helpers of the agent tests: the monitor tests' scripted testbed, and views built by hand."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "monitor"))  # scripted_testbed

import pytest  # noqa: E402

from agentsched.agent.local_llm import ChatServer, completion  # noqa: E402
from agentsched.agent.policy import AgentPolicy  # noqa: E402
from agentsched.agent.view import AgentView  # noqa: E402
from agentsched.model.workflow import Mode, Workflow  # noqa: E402
from agentsched.policies.base import PolicyContext  # noqa: E402

_MODE = r'"?(cpu|gpu_now|gpu_queue|gpu)"?'


def round0_view(wf: Workflow, start: str = "warm", rounds: int = 20) -> AgentView:
    """The view before round 0 (nothing executed)."""
    def no_probe(_m):
        raise AssertionError("round 0 needs no probe")

    policy = AgentPolicy("rules", start=start)
    policy.reset(PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe,
                               rounds=rounds, repeats=1))
    return policy.view(0)


def complete_mappings(text: str, tasks: list[str]) -> list[dict[str, str]]:
    """Every complete mapping written in ``text`` (``A=gpu,B=cpu,...`` or JSON ``"A": "gpu", ...``)."""
    found = []
    sep = r'\s*[,;]?\s*'
    for style in (r"{t}\s*=\s*" + _MODE, r'"{t}"\s*:\s*' + _MODE):
        pattern = sep.join(style.format(t=re.escape(t)) for t in tasks)
        for m in re.finditer(pattern, text):
            found.append(dict(zip(tasks, (g.replace("gpu_now", "gpu") for g in m.groups()), strict=True)))
    return found


def as_labels(mapping: dict[str, Mode]) -> dict[str, str]:
    return {t: ("gpu" if m is Mode.GPU_NOW else m.value) for t, m in mapping.items()}


# ---- a loopback OpenAI-compatible server that replies from a script (the only fake: an LLM endpoint) ----
class Script:
    """A backend replying from a list: strings are message contents, callables get the request body."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls = 0
        self.server: ChatServer | None = None

    def __call__(self, body):
        r = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        if callable(r):
            return r(body, self)
        return 200, completion(r, "scripted")


@pytest.fixture
def serve():
    """``serve(*replies)`` -> (started ChatServer, Script); every server is closed after the test."""
    servers = []

    def start(*replies):
        script = Script(*replies)
        server = ChatServer(script, model="scripted").start()
        script.server = server
        servers.append(server)
        return server, script

    yield start
    for s in servers:
        s.close()
