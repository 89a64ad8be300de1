"""A light fake tool for the Ray testbed tests: ``run`` sleeps and returns its name and its inputs' keys.

Ray ships it to the workers by value (they cannot import the test package), so this module registers
itself for pickling by value when ray is present."""

from __future__ import annotations

import sys
import time

try:
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # the tests that use it skip without ray
    pass


class SleepTool:
    """A light fake tool: ``run`` sleeps and returns what it was given (its inputs' keys)."""

    def __init__(self, name: str, call_s: float) -> None:
        self.name, self.call_s = name, call_s
        self.has_gpu = name not in ("web_search", "log_analyzer", "pdf_parser")
        self.device: str | None = None

    @property
    def loaded(self) -> bool:
        return self.device is not None

    def load(self, device: str = "cpu") -> None:
        self.device = device

    def move(self, device: str) -> None:
        self.device = device

    def run(self, inputs: dict) -> tuple[str, list[str]]:
        time.sleep(self.call_s)
        return self.name, sorted(inputs)

    def sync(self) -> None:
        pass

    def unload(self) -> None:
        self.device = None


class SleepFactory:
    """Builds SleepTools; picklable (Ray ships it to every node's actors)."""

    def __init__(self, call_s: float = 0.05) -> None:
        self.call_s = call_s

    def __call__(self, name: str, size: str, seed: int = 0) -> SleepTool:
        return SleepTool(name, self.call_s)
