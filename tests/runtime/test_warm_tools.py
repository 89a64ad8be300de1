"""Warm tools through the runtime: ``load()`` runs once per tool instance, across invocations and
across two runtimes of one process (the local testbed's shared pool), never once per invocation."""

from __future__ import annotations

import agentsched
from agentsched.runtime import Runtime, workflow_from_tools
from agentsched.testbeds.spec import TestbedSpec
from agentsched.testbeds.tool_pool import shared_pool

LOADS: list[str] = []
UNLOADS: list[str] = []


class Embed(agentsched.Tool):
    name, has_gpu, tags, workload = "embed", False, ("compute-bound",), "a model that is slow to load"
    input_names = ("text",)

    def load(self, device):
        LOADS.append(f"embed:{device}")
        self.model = str.upper

    def run(self, inputs):
        return self.model(inputs["text"])

    def unload(self):
        UNLOADS.append("embed")
        self.model = None


class Count(agentsched.Tool):
    name, has_gpu, tags, workload = "count", False, ("compute-light",), "count characters"

    def load(self, device):
        LOADS.append(f"count:{device}")

    def run(self, inputs):
        return len(inputs["A"])


def test_load_runs_once_across_invocations_and_runtimes(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_pool(), "host_pressure", None)  # (a busy machine's RAM must not evict here)
    LOADS.clear()
    UNLOADS.clear()
    wf = workflow_from_tools("warm", {"A": Embed, "B": Count}, [("A", "B")])
    spec = TestbedSpec(kind="local", cpu_slots=1)
    hits = shared_pool().stats()["hits"]
    with Runtime(wf, store=tmp_path / "a.db", testbed=spec, round_size=3) as one:
        results = [one.invoke(text=f"text {i}") for i in range(7)]
        assert all(r.ok for r in results) and results[-1].outputs == {"B": 6}
        assert sorted(LOADS) == ["count:cpu", "embed:cpu"]  # once each, not per invocation
        with Runtime(wf, store=tmp_path / "b.db", testbed=spec, round_size=3) as two:
            assert all(two.invoke(text="more").ok for _ in range(4))
        assert sorted(LOADS) == ["count:cpu", "embed:cpu"]  # the second runtime found them warm
        assert UNLOADS == []  # still used by the first runtime
        assert shared_pool().stats()["hits"] - hits == 2 * 11 - 2  # every use but the first two was warm
