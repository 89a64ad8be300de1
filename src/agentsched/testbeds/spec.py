"""One testbed spec: every option of every testbed, validated once, in one frozen object.

The CLI builds a ``TestbedSpec`` once per command (the simulated world chosen and loaded once);
``BenchConfig``, the ablation, ``Runtime`` and LangGraph's ``GraphRuntime`` take it, and
``build()`` turns it into a ``Testbed`` through the registry below (``BUILDERS``: a new testbed is
one backend file plus one ``TestbedKind`` member and one line there). ``to_dict()`` is what
results.json records as ``config.testbed``; ``from_dict`` reads it back.

A pydantic model: each value is checked once, here. A refused one is a ``TestbedSpecError`` (a
``TestbedError``) naming its field, which the CLI names by its flag (``cli/common.py``). An option
that does not apply to the spec's kind (``--noise`` on a real testbed, ``--ray-address`` on the
simulator) is refused the same way, never silently ignored.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from agentsched.errors import FieldError, TestbedError, redact_address
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
    return {
        "size": spec.size.value,
        "seed": spec.seed,
        "task_timeout_s": spec.timeout_s,
        **({"cpu_workers": spec.cpu_slots} if spec.cpu_slots is not None else {}),
    }


def _ray_options(spec: TestbedSpec) -> dict[str, Any]:
    return {
        "size": spec.size.value,
        "seed": spec.seed,
        "address": spec.ray_address,
        "emulate_gpu": spec.emulate_gpu,
        "cpu_slots": spec.cpu_slots,
        **({"timeout_s": spec.timeout_s} if spec.timeout_s is not None else {}),
    }


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
    "noise_sigma": (TestbedKind.SIM,),
    "world": (TestbedKind.SIM,),
    "ray_address": (TestbedKind.RAY,),
    "emulate_gpu": (TestbedKind.RAY,),
    "timeout_s": _REAL,
}


class TestbedSpecError(FieldError, TestbedError):
    """A ``TestbedSpec`` value refused: ``field`` names it (the CLI names it by its flag)."""

    def __init__(self, field: str, problem: str, message: str | None = None) -> None:
        super().__init__(field, problem)
        if message is not None:  # a wording that does not start with the field's name
            self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


# how each field's refusal is worded: (what it is called, what it must be); pydantic says which failed
_PROBLEMS: dict[str, tuple[str, str]] = {
    "seed": ("testbed seed", "must be an integer"),
    "noise_sigma": ("noise_sigma", f"must be a number in [0, {MAX_NOISE_SIGMA:g}]"),
    "cpu_slots": ("cpu_slots", "must be an integer >= 1"),
    "timeout_s": ("timeout_s", "must be a finite number > 0"),
    "emulate_gpu": ("emulate_gpu", "must be true or false"),
}


class TestbedSpec(BaseModel):
    """Where runs execute and how. ``TestbedSpec()`` is the default simulator."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    kind: TestbedKind = TestbedKind.SIM  # sim, local or ray (a str is accepted and converted)
    seed: StrictInt = 0  # sim: its noise generator when a run brings none; local/ray: tool weights and inputs
    # sim only (None there: DEFAULT_NOISE_SIGMA); 0: expected values
    noise_sigma: float | None = Field(None, ge=0.0, le=MAX_NOISE_SIGMA, allow_inf_nan=False)
    size: Size = Size.SMALL  # local/ray: the built-in tools' model size (unused by sim)
    # CPU tasks at once (sim: None = many-core host; local/ray: None = the CPUs)
    cpu_slots: StrictInt | None = Field(None, ge=1)
    world: World | None = None  # sim only: the simulated machine's GPU contention (None there: the default)
    ray_address: str | None = None  # ray only: None starts a local instance; auto or HOST:PORT joins
    emulate_gpu: StrictBool = False  # ray only: GPU placements run on the CPU holding the GPU share
    # local/ray (--task-timeout-s): a task running longer ends its execution as error, its tool instance
    # dropped (None: no limit on local; ray's DEFAULT_TIMEOUT_S)
    timeout_s: float | None = Field(None, gt=0.0, allow_inf_nan=False)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            first = e.errors()[0]
            field = str(first["loc"][0]) if first.get("loc") else "testbed"
            name, must = _PROBLEMS.get(field, (field, "is invalid"))
            given = first.get("input")
            raise TestbedSpecError(field, f"{must}, got {given!r}", f"{name} {must}, got {given!r}") from None

    @field_validator("kind", mode="before")
    @classmethod
    def _kind_named(cls, value: Any) -> TestbedKind:
        return _kind(value)

    @field_validator("size", mode="before")
    @classmethod
    def _size_named(cls, value: Any) -> Size:
        try:
            return parse_size(value)
        except Exception:  # noqa: BLE001 - a ToolError; named here as a testbed option
            raise TestbedSpecError(
                "size", f"must be small or paper, got {value!r}", f"testbed size must be small or paper, got {value!r}"
            ) from None

    @field_validator("world", mode="before")
    @classmethod
    def _world_loaded(cls, value: Any) -> World | None:  # a name, file or perturbed:SEED
        if value is None or isinstance(value, World):
            return value
        return load_world(value if isinstance(value, (str, Path)) else str(value))

    @model_validator(mode="before")
    @classmethod
    def _only_where_it_applies(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        kind = _kind(values.get("kind", TestbedKind.SIM))
        if kind is TestbedKind.SIM and parse_size_or_none(values.get("size")) not in (None, Size.SMALL):
            raise TestbedSpecError("size", "applies only to the local and ray testbeds (got sim)")  # it was ignored
        for name, only in _ONLY.items():
            if kind not in only and values.get(name) not in (None, False):
                where = " and ".join(k.value for k in only) + (" testbeds" if len(only) > 1 else " testbed")
                raise TestbedSpecError(name, f"applies only to the {where} (got {kind.value})")
        if kind is TestbedKind.SIM:  # concrete values: two specs of one simulator are equal
            values = {
                **values,
                "noise_sigma": DEFAULT_NOISE_SIGMA if values.get("noise_sigma") is None else values["noise_sigma"],
                "world": values.get("world") or load_world(None),
            }
        return values

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
        return TestbedSpec(**{**{name: getattr(self, name) for name in type(self).model_fields}, **changes})

    # ---- use ------------------------------------------------------------------------------------
    def build(self, **resources: Any) -> Testbed:
        """The testbed this spec names (the caller closes it). ``resources``: what the caller lends
        it beyond the spec (the local testbed's ``pool`` of warm tools: a service's own)."""
        builder, options = BUILDERS[self.kind]
        return builder(**options(self), **resources)

    def to_dict(self) -> dict[str, Any]:
        """As results.json records it (``config.testbed``): fields that do not apply are null."""
        sim = self.simulated
        ray = self.kind is TestbedKind.RAY
        return {
            "name": self.kind.value,
            "seed": self.seed,
            "noise_sigma": self.noise_sigma,
            "size": None if sim else self.size.value,
            "cpu_slots": self.cpu_slots,
            "world": self.world_name,
            # (a file others read: the address's credentials are not written)
            "ray_address": redact_address(self.ray_address) if ray and self.ray_address else None,
            "emulate_gpu": self.emulate_gpu if ray else None,
            "timeout_s": self.timeout_s,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TestbedSpec:
        """The spec ``to_dict`` wrote (the world loaded again by name: built-in or perturbed:SEED)."""
        known = set(cls.model_fields)
        unknown = sorted(set(doc) - known - {"name"})
        if unknown:
            raise TestbedError(
                f"unknown testbed spec field(s) {', '.join(unknown)} (valid: name, "
                f"{', '.join(sorted(known - {'kind'}))})"
            )
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
        valid = ", ".join(k.value for k in TestbedKind)
        raise TestbedSpecError(
            "kind", f"is unknown: {value!r} (valid: {valid})", f"unknown testbed {value!r} (valid: {valid})"
        ) from None


def parse_size_or_none(value: Any) -> Size | None:
    """``value`` as a size, None when it is none or not one (its field's validator says why)."""
    try:
        return None if value is None else parse_size(value)
    except Exception:  # noqa: BLE001 - a ToolError: the size validator words it
        return None
