"""The Ray testbed's node-side tool host keeps loaded tools warm: ``load()`` runs once per instance,
not once per run (the actor class is used here as a plain object: no Ray needed)."""

from __future__ import annotations

from agentsched.testbeds.ray.actors import ToolHost


class Counted:
    loads: list[str] = []

    def __init__(self) -> None:
        self.device = None

    def load(self, device):
        Counted.loads.append(device)
        self.device = device

    def unload(self):
        Counted.loads.append("unload")
        self.device = None


def test_warm_loads_each_tool_once_across_runs():
    Counted.loads = []
    host = ToolHost(
        factory=lambda name, size, seed=0: Counted(), size="small", seed=0, gpu_device="cpu", torch_threads=None
    )
    needs = [(("mod:Tool", "cpu"), "cpu")]
    for _ in range(3):
        assert host.warm(needs, {"mod:Tool": Counted}) is None
    assert Counted.loads == ["cpu"]  # kept loaded between runs
    assert host.warm([(("other", "cpu"), "cpu")], {}) is None  # the next workflow no longer uses it
    assert Counted.loads == ["cpu", "unload", "cpu"]
    host.unload_all()
    assert Counted.loads[-1] == "unload"
