"""One testbed spec: every option of every testbed, validated once, in one frozen object.

The CLI builds a ``TestbedSpec`` once per command (the simulated world chosen and loaded once);
``BenchConfig``, the ablation, ``Runtime`` and LangGraph's ``GraphRuntime`` take it, and
``build()`` turns it into a ``Testbed`` through the registry below (``BUILDERS``: a new testbed is
one backend file plus one ``TestbedKind`` member and one line there). ``to_dict()`` is what
results.json records as ``config.testbed``; ``from_dict`` reads it back.

An option that does not apply to the spec's kind (``--noise`` on a real testbed, ``--ray-address``
on the simulator) is a one-line ``TestbedError``, not a silently ignored value.
"""

from __future__ import annotations

import enum
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from agentsched.errors import TestbedError, redact_address
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.world import World, load_world
from agentsched.tools.base import Size, parse_size


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
BUILDERS: dict[TestbedKind, tuple[Callable[..., Testbed], Callable[[TestbedSpec], dict[str, Any]]]] = {
    TestbedKind.SIM: (_lazy("agentsched.testbeds.sim", "SimTestbed"), _sim_options),
    TestbedKind.LOCAL: (_lazy("agentsched.testbeds.local", "LocalTestbed", extra="tools"), _local_options),
    TestbedKind.RAY: (_lazy("agentsched.testbeds.ray", "RayTestbed", extra="ray"), _ray_options),
}


DEFAULT_NOISE_SIGMA = 0.03  # the simulator's log-normal noise per task (~ +-3%), as calibrated (docs/simulator.md)
MAX_NOISE_SIGMA = 1.0  # log-normal sigma; 1.0 already spreads latencies by e^+-1 (one sigma)

# options that mean something on some kinds only (the others refuse them in one line)
_REAL = (TestbedKind.LOCAL, TestbedKind.RAY)
_ONLY: dict[str, tuple[TestbedKind, ...]] = {
    "noise_sigma": (TestbedKind.SIM,), "world": (TestbedKind.SIM,),
    "ray_address": (TestbedKind.RAY,), "emulate_gpu": (TestbedKind.RAY,), "timeout_s": _REAL,
}


@dataclass(frozen=True)
class TestbedSpec:
    """Where runs execute and how. ``TestbedSpec()`` is the default simulator."""

    __test__ = False  # not a pytest test class

    kind: TestbedKind = TestbedKind.SIM  # sim, local or ray (a str is accepted and converted)
    seed: int = 0  # sim: its noise generator when a run brings none; local/ray: tool weights and inputs
    noise_sigma: float | None = None  # sim only (None there: DEFAULT_NOISE_SIGMA); 0: expected values
    size: Size = Size.SMALL  # local/ray: the built-in tools' model size (unused by sim)
    cpu_slots: int | None = None  # CPU tasks at once (sim: None = many-core host; local/ray: None = the CPUs)
    world: World | None = None  # sim only: the simulated machine's GPU contention (None there: the default)
    ray_address: str | None = None  # ray only: None starts a local instance; auto or HOST:PORT joins
    emulate_gpu: bool = False  # ray only: GPU placements run on the CPU holding the GPU share
    # local/ray (--task-timeout-s): a task running longer ends its execution as error, its tool instance
    # dropped (None: no limit on local; ray's DEFAULT_TIMEOUT_S)
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        kind = _kind(self.kind)
        object.__setattr__(self, "kind", kind)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TestbedError(f"testbed seed must be an integer, got {self.seed!r}")
        try:
            object.__setattr__(self, "size", parse_size(self.size))
        except Exception:  # noqa: BLE001 - a ToolError; named here as a testbed option
            raise TestbedError(f"testbed size must be small or paper, got {self.size!r}") from None
        if kind is TestbedKind.SIM and self.size is not Size.SMALL:  # (the simulator runs no tool: it was ignored)
            raise TestbedError("size applies only to the local and ray testbeds (got sim)")
        _check_number("noise_sigma", self.noise_sigma, low=0.0, high=MAX_NOISE_SIGMA)
        _check_number("timeout_s", self.timeout_s, low=0.0, low_open=True)
        if self.cpu_slots is not None and (isinstance(self.cpu_slots, bool) or not isinstance(self.cpu_slots, int)
                                           or self.cpu_slots < 1):
            raise TestbedError(f"cpu_slots must be an integer >= 1, got {self.cpu_slots!r}")
        if not isinstance(self.emulate_gpu, bool):
            raise TestbedError(f"emulate_gpu must be true or false, got {self.emulate_gpu!r}")
        for name, only in _ONLY.items():
            value = getattr(self, name)
            if kind not in only and value not in (None, False):
                where = " and ".join(k.value for k in only) + (" testbeds" if len(only) > 1 else " testbed")
                raise TestbedError(f"{name} applies only to the {where} (got {kind.value})")
        if self.world is not None and not isinstance(self.world, World):  # a name, file or perturbed:SEED
            object.__setattr__(self, "world", load_world(self.world if isinstance(self.world, (str, Path))
                                                         else str(self.world)))
        if kind is TestbedKind.SIM:  # concrete values: two specs of one simulator are equal
            if self.noise_sigma is None:
                object.__setattr__(self, "noise_sigma", DEFAULT_NOISE_SIGMA)
            if self.world is None:
                object.__setattr__(self, "world", load_world(None))

    # ---- derived --------------------------------------------------------------------------------
    @property
    def simulated(self) -> bool:
        return self.kind is TestbedKind.SIM

    @property
    def world_name(self) -> str | None:
        """The simulated world's name; None off the simulator."""
        return None if self.world is None else self.world.name

    def replace(self, **changes: Any) -> TestbedSpec:
        """A copy with ``changes``, validated again."""
        return replace(self, **changes)

    # ---- use ------------------------------------------------------------------------------------
    def build(self) -> Testbed:
        """The testbed this spec names (the caller closes it)."""
        builder, options = BUILDERS[self.kind]
        return builder(**options(self))

    def to_dict(self) -> dict[str, Any]:
        """As results.json records it (``config.testbed``): fields that do not apply are null."""
        sim = self.simulated
        ray = self.kind is TestbedKind.RAY
        return {"name": self.kind.value, "seed": self.seed, "noise_sigma": self.noise_sigma,
                "size": None if sim else self.size.value, "cpu_slots": self.cpu_slots, "world": self.world_name,
                # (a file others read: the address's credentials are not written)
                "ray_address": redact_address(self.ray_address) if ray and self.ray_address else None,
                "emulate_gpu": self.emulate_gpu if ray else None,
                "timeout_s": self.timeout_s}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TestbedSpec:
        """The spec ``to_dict`` wrote (the world loaded again by name: built-in or perturbed:SEED)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known - {"name"})
        if unknown:
            raise TestbedError(f"unknown testbed spec field(s) {', '.join(unknown)} (valid: name, "
                               f"{', '.join(sorted(known - {'kind'}))})")
        kind = _kind(doc.get("name", doc.get("kind", TestbedKind.SIM)))
        values = {k: v for k, v in doc.items() if k in known and k != "kind" and v is not None}
        if kind is TestbedKind.SIM:
            values.pop("size", None)
        else:  # to_dict writes the sim-only and ray-only fields as null or false elsewhere
            values = {k: v for k, v in values.items() if kind in _ONLY.get(k, (kind,))}
        return cls(kind=kind, **values)


def as_spec(value: TestbedSpec | TestbedKind | str | None) -> TestbedSpec:
    """``value`` as a spec: a spec as is, a kind name (``"sim"``, ``"local"``, ``"ray"``) as that
    kind's default spec (the shorthand ``Runtime(..., testbed="sim")`` takes), None as the simulator."""
    if isinstance(value, TestbedSpec):
        return value
    return TestbedSpec(kind=TestbedKind.SIM if value is None else value)  # type: ignore[arg-type]


def _kind(value: Any) -> TestbedKind:
    try:
        return TestbedKind(str(getattr(value, "value", value)).strip().lower())
    except ValueError:
        raise TestbedError(f"unknown testbed {value!r} (valid: {', '.join(k.value for k in TestbedKind)})") from None


def _check_number(name: str, value: Any, *, low: float, high: float | None = None, low_open: bool = False) -> None:
    if value is None:
        return
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        if high is not None:
            raise TestbedError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
        raise TestbedError(f"{name} must be a finite number {'>' if low_open else '>='} {low:g}, got {value!r}")
