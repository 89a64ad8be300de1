"""The run loop tells the testbed when each round begins: round 0 before the policy's reset (its
probes belong to round 0), every later round before the policy proposes (and probes) for it."""

from __future__ import annotations

from agentsched.loop import run_loop
from agentsched.model import Mode
from agentsched.policies.base import Policy, Proposal
from agentsched.testbeds import SimTestbed


class Recording(SimTestbed):
    def __init__(self, events: list[str], **kw) -> None:
        super().__init__(**kw)
        self.events = events

    def begin_round(self, index: int) -> None:
        self.events.append(f"begin {index}")
        super().begin_round(index)

    def run(self, workflow, mapping, **kw):
        self.events.append("run")
        return super().run(workflow, mapping, **kw)


class Probing(Policy):
    name = "probing"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def reset(self, ctx) -> None:
        super().reset(ctx)
        self.events.append("reset")
        ctx.probe({"A": Mode.CPU})

    def propose(self, round_index):
        self.events.append(f"propose {round_index}")
        self.ctx.probe({"A": Mode.GPU_NOW})
        return Proposal({"A": Mode.CPU})


def test_each_round_begins_before_its_probes_and_runs(make_workflow, no_contention):
    wf = make_workflow({"a": {"cpu_ms": 30, "gpu_ms": 10}}, {"A": "a"})
    events: list[str] = []
    run_loop(wf, Probing(events), Recording(events, world=no_contention, noise_sigma=0.0), rounds=3, repeats=2)
    assert events == [
        "begin 0",
        "reset",
        "run",
        "propose 0",
        "run",
        "run",
        "run",
        "begin 1",
        "propose 1",
        "run",
        "run",
        "run",
        "begin 2",
        "propose 2",
        "run",
        "run",
        "run",
    ]
