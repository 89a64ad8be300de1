"""The simulated world: how strongly GPU tools contend with each other on the simulated machine.

A tool card says what a profiler measures of one tool in isolation (cpu_ms, gpu_ms, load_ms,
vram_mb, workload, tags); every scheduler sees it. How much concurrent GPU tools slow each other
(``contention.gpu_rates``: sensitivity s, pressure p) is the simulator's ground truth instead: it
lives here, in a *world* given to the sim testbed only, so no policy, reasoner or prompt can read
it. A world is a JSON file::

    {"name": "a5500", "source": "...",
     "contention": {"clip": {"sensitivity": 0.336, "pressure": 2.929}, ...},
     "defaults_by_tag": {"memory-bound": {"sensitivity": 0.75, "pressure": 0.45}, ...},
     "default": {"sensitivity": 0.4, "pressure": 0.3}}

A GPU tool's parameters: its own entry (an amplified ``name_xK`` takes ``name``'s), else the entry
of its first tag that has one, else ``default``. ``load_world`` takes a built-in name (``a5500``,
the default), a file path, or ``perturbed:SEED`` (see ``perturbed``).
"""

from __future__ import annotations

import json
import math
import random
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentsched.errors import WorldError
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.files import read_document

MAX_CONTENTION = 1e3  # beyond it a parameter is a typo (and simulated time could overflow)
DEFAULT_WORLD = "a5500"  # the calibrated world, used when none is named
PERTURBED_PREFIX = "perturbed:"
PERTURB_MAX_FACTOR = 3.0  # perturbed worlds scale each parameter by a factor in [1/3, 3]


class Contention(BaseModel):
    """(sensitivity, pressure) of one GPU tool; see ``contention.gpu_rates``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    sensitivity: float = Field(ge=0, le=MAX_CONTENTION)  # slowdown per unit of foreign GPU pressure
    pressure: float = Field(ge=0, le=MAX_CONTENTION)  # GPU (SM, DRAM bandwidth) it takes from others


class World(BaseModel):
    """The GPU contention of one simulated machine."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)  # e.g. "a5500", "perturbed:1", a file stem
    source: str = ""  # where the figures come from
    contention: dict[str, Contention] = Field(default_factory=dict)  # tool -> its parameters
    defaults_by_tag: dict[str, Contention] = Field(default_factory=dict)  # tag -> parameters
    default: Contention  # a GPU tool with neither its own entry nor a tag entry

    def params(self, card: ToolCard) -> tuple[float, float]:
        """(sensitivity, pressure) of the tool of ``card`` in this world."""
        c = self.lookup(card)
        return c.sensitivity, c.pressure

    def lookup(self, card: ToolCard) -> Contention:
        """The entry that applies to ``card``'s tool: its own, else its first known tag's, else the default."""
        own = self.contention.get(card.name) or self.contention.get(split_amplified(card.name)[0])
        if own is not None:
            return own
        for tag in card.tags:  # the first tag of the card that the world knows wins
            if tag in self.defaults_by_tag:
                return self.defaults_by_tag[tag]
        return self.default

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


def parse_world(data: Any, name: str) -> World:
    """Validate a decoded world document; raise WorldError with a one-line reason."""
    if not isinstance(data, dict):
        raise WorldError(f"world {name!r}: expected a JSON object")
    try:
        return World.model_validate({"name": name, **data})
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "world"
        more = f" (+{e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise WorldError(f"world {name!r}: {loc}: {first['msg']}{more}") from None


def builtin_worlds() -> list[str]:
    """Names of the worlds shipped in the package (``agentsched/data/worlds/*.json``)."""
    root = resources.files("agentsched.data") / "worlds"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


@lru_cache(maxsize=8)
def _load_builtin(name: str) -> World:
    text = (resources.files("agentsched.data") / "worlds" / f"{name}.json").read_text()
    return parse_world(json.loads(text), name)


def _load_file(path: Path) -> World:
    data = read_document(path, "world file", WorldError)
    name = data.get("name", path.stem) if isinstance(data, dict) else path.stem
    return parse_world(data, name if isinstance(name, str) and name else path.stem)


def perturbed(base: World, seed: int) -> World:
    """``base`` with every parameter scaled by an independent factor drawn log-uniformly from
    [1/3, 3] (``3 ** uniform(-1, 1)``) by ``random.Random(seed)``: the model-mismatch stress test.

    Draw order (fixed, so a seed names one world): the tools of ``contention`` sorted by name,
    then the tags of ``defaults_by_tag`` sorted, then ``default``; sensitivity before pressure."""
    rng = random.Random(seed)
    log_max = math.log(PERTURB_MAX_FACTOR)

    def scaled(c: Contention) -> dict[str, float]:
        s = c.sensitivity * math.exp(rng.uniform(-log_max, log_max))
        p = c.pressure * math.exp(rng.uniform(-log_max, log_max))
        return {"sensitivity": min(s, MAX_CONTENTION), "pressure": min(p, MAX_CONTENTION)}

    contention = {t: scaled(base.contention[t]) for t in sorted(base.contention)}
    by_tag = {t: scaled(base.defaults_by_tag[t]) for t in sorted(base.defaults_by_tag)}
    default = scaled(base.default)
    return World.model_validate({
        "name": f"{PERTURBED_PREFIX}{seed}",
        "source": f"{base.name} with each sensitivity and pressure times 3**U(-1, 1) drawn by random.Random({seed})",
        "contention": contention, "defaults_by_tag": by_tag, "default": default,
    })


def load_world(ref: str | Path | World | None = None) -> World:
    """A world by built-in name (default ``a5500``), JSON file path, or ``perturbed:SEED`` (the
    default world perturbed with that integer seed). One-line ``WorldError`` otherwise."""
    if isinstance(ref, World):
        return ref
    s = DEFAULT_WORLD if ref is None else str(ref)
    if s.startswith(PERTURBED_PREFIX):
        text = s[len(PERTURBED_PREFIX):]
        try:
            seed = int(text)
        except ValueError:
            raise WorldError(f"world {s!r}: the seed after 'perturbed:' must be an integer") from None
        return perturbed(_load_builtin(DEFAULT_WORLD), seed)
    if s in builtin_worlds():
        return _load_builtin(s)
    path = Path(s)
    if not path.exists():
        raise WorldError(f"world {s!r} is neither a built-in world ({', '.join(builtin_worlds())}), "
                         f"perturbed:SEED, nor a file")
    return _load_file(path)


def choose_world(given: str | Path | World | None, from_workflows: list[str | None]) -> str | Path | World:
    """The world a command runs in: ``given`` (``--world``) when set; else the world the workflow
    files name (``world:`` keys; a workflow naming none, e.g. a built-in scenario, is in the
    default world). One-line ``WorldError`` when the workflows are in different worlds and none is
    given: one run uses one world."""
    if given is not None:
        return given
    named = list(dict.fromkeys(DEFAULT_WORLD if w is None else w for w in from_workflows))
    if len(named) > 1:
        raise WorldError(f"the workflows name different worlds ({', '.join(named)}): choose one with --world")
    return named[0] if named else DEFAULT_WORLD

