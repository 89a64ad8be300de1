"""A testbed whose runs fail in host code (an LLM endpoint down), not in a placed task.

Each failing run is the inner testbed's run with its tasks' spans kept (the placed tools did run)
and an error raised by a host node around them, marked ``extra["failed_node"]`` as the LangGraph
testbed marks it: ``Execution.placement_failed`` is False, so a round of such runs only has nothing
to judge its mapping by (``RoundResult.judged`` False).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed

HOST_ERROR = "node llm (host) failed: RuntimeError: the LLM endpoint is down"


def host_failed(x: Execution, external: bool = False) -> Execution:
    """``x`` as if the host code around its tasks raised once they had run (``external``: as the
    testbed marks a failure no placement can cause, an endpoint refusing)."""
    return dataclasses.replace(
        x,
        status=Status.ERROR,
        e2e_ms=None,
        message=HOST_ERROR,
        extra={**x.extra, "failed_node": "llm", "external": external},
    )


class HostDown(Testbed):
    """``inner`` whose runs, after the first ``healthy`` ones, fail in host code: ``failing`` of them
    (rounds' and probes' alike; None: every later run), marked ``external`` or not."""

    name = "host-down"

    def __init__(self, inner: Testbed, failing: int | None = None, healthy: int = 0, external: bool = False) -> None:
        self.inner = inner
        self.external = external
        self.failing = failing
        self.healthy = healthy
        self.runs = 0  # runs so far

    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        x = self.inner.run(workflow, mapping, rng=rng)  # the inner testbeds here take no inputs
        self.runs += 1
        down = self.runs - self.healthy
        return host_failed(x, self.external) if down > 0 and (self.failing is None or down <= self.failing) else x

    def begin_round(self, index: int) -> None:
        self.inner.begin_round(index)
