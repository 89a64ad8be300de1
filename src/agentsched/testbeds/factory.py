"""Testbeds by name: ``make_testbed`` builds one from its constructor's own options (the kinds and
their registry live with the spec, ``spec.py``: a new testbed is one ``TestbedKind`` member and one
``BUILDERS`` line there). Callers with a command's options build a ``TestbedSpec`` instead.
"""

from __future__ import annotations

from typing import Any

from agentsched.errors import TestbedError
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import BUILDERS, TestbedKind


def make_testbed(name: str | TestbedKind = TestbedKind.SIM, **options: Any) -> Testbed:
    """Build a testbed by name with its constructor's own options (sim: ``noise_sigma``, ``seed``,
    ``cpu_slots``, ``world``; local: see ``local.LocalBackend``; ray: see ``ray.RayTestbed``, which
    needs the ``[ray]`` extra). Callers with a command's options build a ``TestbedSpec`` instead."""
    try:
        kind = TestbedKind(str(getattr(name, "value", name)).lower())
    except ValueError:
        raise TestbedError(f"unknown testbed {name!r} (valid: {', '.join(k.value for k in TestbedKind)})") from None
    return BUILDERS[kind][0](**options)
