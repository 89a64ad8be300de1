"""Fixtures of the agent tests: a loopback OpenAI-compatible server that replies from a script (the
only fake in the project: an LLM endpoint)."""

from __future__ import annotations

import pytest

from agentsched.agent.local_llm import ChatServer, completion


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
