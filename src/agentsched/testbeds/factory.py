"""Testbeds by name: one enum, one factory that raises on unknown names."""

from __future__ import annotations

import enum
from typing import Any

from agentsched.errors import TestbedError
from agentsched.testbeds.base import Testbed


class TestbedKind(str, enum.Enum):
    __test__ = False
    SIM = "sim"  # discrete-event simulator (default; no hardware needed)
    LOCAL = "local"  # real tools on this machine's CPU, and CUDA when present
    RAY = "ray"  # real tools on a Ray cluster (the [ray] extra), VRAM admitted by Ray's resources


def make_testbed(name: str | TestbedKind = TestbedKind.SIM, **options: Any) -> Testbed:
    """Build a testbed. ``local`` and ``ray`` import torch lazily (the ``[tools]`` extra); ``ray`` imports
    ray lazily (the ``[ray]`` extra)."""
    try:
        kind = TestbedKind(str(getattr(name, "value", name)).lower())
    except ValueError:
        raise TestbedError(
            f"unknown testbed {name!r} (valid: {', '.join(k.value for k in TestbedKind)})"
        ) from None
    if kind is TestbedKind.SIM:
        from agentsched.testbeds.sim import SimTestbed

        return SimTestbed(**options)
    if kind is TestbedKind.RAY:
        from agentsched.testbeds.ray import RayTestbed

        return RayTestbed(**options)
    try:
        from agentsched.testbeds.local import LocalTestbed
    except ImportError as e:  # torch/transformers missing
        raise TestbedError(
            f"the local testbed needs the tools extra (pip install 'agentsched[tools]'): {e}"
        ) from None
    return LocalTestbed(**options)
