"""Testbeds by name: one enum, one registry of builders, one factory that raises on unknown names.

A new testbed is one backend file (a ``driver.Backend`` and its ``driver.Driver`` subclass) plus
one ``TestbedKind`` member and one ``_BUILDERS`` line here.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable
from typing import Any

from agentsched.errors import TestbedError
from agentsched.testbeds.base import Testbed


class TestbedKind(str, enum.Enum):
    __test__ = False
    SIM = "sim"  # discrete-event simulator (default; no hardware needed)
    LOCAL = "local"  # real tools on this machine's CPU, and CUDA when present
    RAY = "ray"  # real tools on a Ray cluster (the [ray] extra), VRAM admitted by Ray's resources


def _lazy(module: str, cls: str, extra: str | None = None) -> Callable[..., Testbed]:
    """A builder importing ``module.cls`` on first use (heavy dependencies stay optional)."""

    def build(**options: Any) -> Testbed:
        try:
            testbed_cls = getattr(importlib.import_module(module), cls)
        except ImportError as e:  # e.g. torch/transformers missing for local
            if extra is None:
                raise
            raise TestbedError(
                f"the {module.rsplit('.', 1)[-1]} testbed needs the {extra} extra "
                f"(pip install 'agentsched[{extra}]'): {e}"
            ) from None
        return testbed_cls(**options)

    return build


_BUILDERS: dict[TestbedKind, Callable[..., Testbed]] = {
    TestbedKind.SIM: _lazy("agentsched.testbeds.sim", "SimTestbed"),
    TestbedKind.LOCAL: _lazy("agentsched.testbeds.local", "LocalTestbed", extra="tools"),
    TestbedKind.RAY: _lazy("agentsched.testbeds.ray", "RayTestbed", extra="ray"),
}


def make_testbed(name: str | TestbedKind = TestbedKind.SIM, **options: Any) -> Testbed:
    """Build a testbed by name with its options (sim: ``noise_sigma``, ``seed``, ``cpu_slots``,
    ``world``; local: see ``local.LocalBackend``; ray: see ``ray.RayTestbed``, which needs the ``[ray]``
    extra)."""
    try:
        kind = TestbedKind(str(getattr(name, "value", name)).lower())
    except ValueError:
        raise TestbedError(
            f"unknown testbed {name!r} (valid: {', '.join(k.value for k in TestbedKind)})"
        ) from None
    return _BUILDERS[kind](**options)
