"""A user tool that takes a while (``seconds``): keeps invocations in flight while a test signals."""

from __future__ import annotations

import time
from typing import Any

import agentsched


class Sleep(agentsched.Tool):
    name = "sleep"
    workload = "wait"
    tags = ("compute-light",)
    has_gpu = False
    input_names = ("seconds",)

    def run(self, inputs: dict[str, Any]) -> Any:
        time.sleep(float(inputs["seconds"]))
        return float(inputs["seconds"])
