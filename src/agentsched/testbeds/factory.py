"""Testbeds by name: one enum, one registry of builders, one factory that raises on unknown names.

A new testbed is one backend file (a ``driver.Backend`` and its ``driver.Driver`` subclass) plus
one ``TestbedKind`` member and one ``_BUILDERS`` line here: the class, and how a ``TestbedSpec``
(``spec.py``) becomes its constructor's keyword arguments.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentsched.errors import TestbedError
from agentsched.testbeds.base import Testbed

if TYPE_CHECKING:
    from agentsched.testbeds.spec import TestbedSpec


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


def _sim_options(spec: TestbedSpec) -> dict[str, Any]:
    return {"noise_sigma": spec.noise_sigma, "seed": spec.seed, "cpu_slots": spec.cpu_slots, "world": spec.world}


def _local_options(spec: TestbedSpec) -> dict[str, Any]:
    # the local testbed's CPU slots are its worker pool (None: one worker per core)
    return {"size": spec.size.value, "seed": spec.seed, "task_timeout_s": spec.timeout_s,
            **({"cpu_workers": spec.cpu_slots} if spec.cpu_slots is not None else {})}


def _ray_options(spec: TestbedSpec) -> dict[str, Any]:
    return {"size": spec.size.value, "seed": spec.seed, "address": spec.ray_address,
            "emulate_gpu": spec.emulate_gpu, "cpu_slots": spec.cpu_slots,
            **({"timeout_s": spec.timeout_s} if spec.timeout_s is not None else {})}


# kind -> (builder, the builder's keyword arguments from a spec)
_BUILDERS: dict[TestbedKind, tuple[Callable[..., Testbed], Callable[[TestbedSpec], dict[str, Any]]]] = {
    TestbedKind.SIM: (_lazy("agentsched.testbeds.sim", "SimTestbed"), _sim_options),
    TestbedKind.LOCAL: (_lazy("agentsched.testbeds.local", "LocalTestbed", extra="tools"), _local_options),
    TestbedKind.RAY: (_lazy("agentsched.testbeds.ray", "RayTestbed", extra="ray"), _ray_options),
}


def build_testbed(spec: TestbedSpec) -> Testbed:
    """The testbed ``spec`` names (``TestbedSpec.build``)."""
    builder, options = _BUILDERS[spec.kind]
    return builder(**options(spec))


def make_testbed(name: str | TestbedKind = TestbedKind.SIM, **options: Any) -> Testbed:
    """Build a testbed by name with its constructor's own options (sim: ``noise_sigma``, ``seed``,
    ``cpu_slots``, ``world``; local: see ``local.LocalBackend``; ray: see ``ray.RayTestbed``, which
    needs the ``[ray]`` extra). Callers with a command's options build a ``TestbedSpec`` instead."""
    try:
        kind = TestbedKind(str(getattr(name, "value", name)).lower())
    except ValueError:
        raise TestbedError(
            f"unknown testbed {name!r} (valid: {', '.join(k.value for k in TestbedKind)})"
        ) from None
    return _BUILDERS[kind][0](**options)
