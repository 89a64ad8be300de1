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
of its first tag that has one, else ``default``. Optional keys:

* ``"law"``: the contention law (``laws.py``): ``"linear"`` (the default, ``contention.gpu_rates``,
  the law the planner's predictor assumes), ``"max"``, ``{"kind": "power", "gamma": 1.5}``,
  ``{"kind": "threshold", "threshold": 0.5}``, ``{"kind": "saturating", "scale": 1.0}``;
* ``"noise"``: the noise shape (``noise.py``), e.g. ``{"kind": "student_t", "df": 3,
  "straggler_probability": 0.02, "straggler_factor": 3}``; default log-normal;
* ``"base"``: a world (built-in name, or file path relative to this file) whose ``contention``,
  ``defaults_by_tag``, ``default``, ``law`` and ``noise`` this one takes unless it sets them: the
  built-in ``a5500-max`` is ``{"base": "a5500", "law": "max"}``.

* ``"vram"``: cards that understate VRAM (``VramUnderstatement``): some tools really hold 5-30% more
  than their card says (CUDA contexts, allocator caches, fragmentation). Only the simulator's start
  rules see the real figure (``World.real_cards``); a policy plans on the card and meets the rest as OOMs
  and measured peaks.

``load_world`` takes a built-in name (``a5500``, the default; ``builtin_worlds()`` lists them all:
``a5500-max``, ``a5500-power``, ``a5500-threshold``, ``a5500-saturating``, ``a5500-heavy``), a file
path, ``perturbed:SEED`` or ``perturbed:SEED:BASE`` (see ``perturbed``), ``understated:SEED`` or
``understated:SEED:BASE`` (BASE with ``{"vram": {"seed": SEED}}``: about half the tools 5-30% over
their cards), or ``drift:A,B,ROUND``
(see ``drift_world``: A before round ROUND, B from it on; A and B any of the above except a drift).

A world may change between rounds: ``World.at_round(index)`` is the world in effect in round
``index`` (a plain world: itself; a ``DriftWorld``: its ``before`` or ``after``). The sim testbed
switches when the run loop calls ``Testbed.begin_round(index)`` at the start of every round.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentsched.errors import WorldError, validation_line
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.files import read_document
from agentsched.testbeds.laws import Law, LinearLaw, law_from_shorthand
from agentsched.testbeds.noise import Noise

MAX_CONTENTION = 1e3  # beyond it a parameter is a typo (and simulated time could overflow)
DEFAULT_WORLD = "a5500"  # the calibrated world, used when none is named
PERTURBED_PREFIX = "perturbed:"
PERTURB_MAX_FACTOR = 3.0  # perturbed worlds scale each parameter by a factor in [1/3, 3]
DRIFT_PREFIX = "drift:"
UNDERSTATED_PREFIX = "understated:"
MAX_VRAM_FACTOR = 4.0  # a real VRAM beyond 4x its card is a typo, not an allocator's overhead
MAX_BASE_DEPTH = 8  # a chain of "base" worlds longer than this is a cycle or a mistake


class Contention(BaseModel):
    """(sensitivity, pressure) of one GPU tool; see ``contention.gpu_rates``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    sensitivity: float = Field(ge=0, le=MAX_CONTENTION)  # slowdown per unit of foreign GPU pressure
    pressure: float = Field(ge=0, le=MAX_CONTENTION)  # GPU (SM, DRAM bandwidth) it takes from others


class VramUnderstatement(BaseModel):
    """Tools whose real VRAM is above their card: ``tools`` names factors outright; every other tool
    (by base name: ``clip_x12`` is ``clip``) is over its card with probability ``share``, by a factor
    drawn uniformly in [``low``, ``high``], both drawn by ``random.Random(f"{seed}:{tool}")`` (so a
    tool's factor does not depend on which other tools a workflow uses)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seed: int = 0
    share: float = Field(default=0.5, ge=0, le=1)
    low: float = Field(default=1.05, ge=1, le=MAX_VRAM_FACTOR)
    high: float = Field(default=1.30, ge=1, le=MAX_VRAM_FACTOR)
    tools: dict[str, float] = Field(default_factory=dict)  # tool -> real VRAM / card VRAM

    @field_validator("tools")
    @classmethod
    def _factors(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [t for t, f in v.items() if not 0 < f <= MAX_VRAM_FACTOR]
        if bad:
            raise ValueError(f"factor of {bad[0]!r} must be in (0, {MAX_VRAM_FACTOR:g}]")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> VramUnderstatement:
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not exceed high ({self.high:g})")
        return self

    def factor(self, tool: str) -> float:
        """Real VRAM over card VRAM of ``tool``."""
        base = split_amplified(tool)[0]
        if tool in self.tools or base in self.tools:
            return self.tools.get(tool, self.tools.get(base, 1.0))
        rng = random.Random(f"{self.seed}:{base}")
        return rng.uniform(self.low, self.high) if rng.random() < self.share else 1.0


class World(BaseModel):
    """The GPU contention of one simulated machine."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)  # e.g. "a5500", "perturbed:1", a file stem
    source: str = ""  # where the figures come from
    contention: dict[str, Contention] = Field(default_factory=dict)  # tool -> its parameters
    defaults_by_tag: dict[str, Contention] = Field(default_factory=dict)  # tag -> parameters
    default: Contention  # a GPU tool with neither its own entry nor a tag entry
    law: Law = Field(default_factory=LinearLaw)  # how co-running GPU tasks slow each other (laws.py)
    noise: Noise = Field(default_factory=Noise)  # the shape of per-task noise (noise.py)
    vram: VramUnderstatement | None = None  # cards that understate VRAM (None: every card is exact)

    @field_validator("law", mode="before")
    @classmethod
    def _law_by_name(cls, value: Any) -> Any:
        return law_from_shorthand(value)

    def at_round(self, index: int) -> World:
        """The world in effect in round ``index`` (a plain world never changes)."""
        return self

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

    def real_cards(self, cards: Mapping[str, ToolCard]) -> dict[str, ToolCard]:
        """``cards`` with the VRAM their tools really hold in this world (the simulator's start rules only)."""
        if self.vram is None:
            return dict(cards)
        out = {}
        for t, c in cards.items():
            f = self.vram.factor(c.name) if c.vram_mb else 1.0
            out[t] = c if f == 1.0 else c.model_copy(update={"vram_mb": c.vram_mb * f})  # type: ignore[operator]
        return out

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


class DriftWorld(World):
    """A world that changes once: ``before`` in rounds < ``switch_round``, ``after`` from it on (as
    when another job starts sharing the GPU). Its own fields (``contention``, ``law``, ...) are
    ``before``'s, so it acts as the round-0 world wherever no round is known (e.g. ``expected``
    before the first round)."""

    before: World
    after: World
    switch_round: int = Field(ge=0)

    def at_round(self, index: int) -> World:
        return (self.before if index < self.switch_round else self.after).at_round(index)


def drift_world(before: World, after: World, switch_round: int) -> DriftWorld:
    """The world ``before`` for rounds < ``switch_round`` and ``after`` from it on; named
    ``drift:BEFORE,AFTER,ROUND``."""
    if isinstance(switch_round, bool) or not isinstance(switch_round, int) or switch_round < 0:
        raise WorldError(f"drift: the switch round must be an integer >= 0, got {switch_round!r}")
    fields = before.model_dump(exclude={"name", "source", "before", "after", "switch_round"})
    return DriftWorld.model_validate(
        {
            **fields,
            "name": f"{DRIFT_PREFIX}{before.name},{after.name},{switch_round}",
            "source": f"{before.name} before round {switch_round}, {after.name} from it on",
            "before": before,
            "after": after,
            "switch_round": switch_round,
        }
    )


def parse_world(data: Any, name: str, base_dir: Path | None = None, *, _depth: int = 0) -> World:
    """Validate a decoded world document; raise WorldError with a one-line reason. A ``base`` key
    names the world it extends (a relative path is relative to ``base_dir``)."""
    if not isinstance(data, dict):
        raise WorldError(f"world {name!r}: expected a JSON object")
    if "base" in data:
        data = _extend(data, name, base_dir, _depth)
    try:
        return World.model_validate({"name": name, **data})
    except ValidationError as e:
        raise WorldError(f"world {name!r}: {validation_line(e.errors(), 'world')}") from None


def _extend(data: dict[str, Any], name: str, base_dir: Path | None, depth: int) -> dict[str, Any]:
    """``data`` over the fields of the world its ``base`` key names."""
    ref = data["base"]
    if not isinstance(ref, str) or not ref:
        raise WorldError(f"world {name!r}: base: must be a world name or a file path")
    if depth >= MAX_BASE_DEPTH:
        raise WorldError(f"world {name!r}: base: more than {MAX_BASE_DEPTH} worlds deep (a cycle?)")
    named = ref in builtin_worlds() or ref.startswith((PERTURBED_PREFIX, DRIFT_PREFIX, UNDERSTATED_PREFIX))
    if base_dir is not None and not named and not Path(ref).is_absolute():
        ref = str(base_dir / ref)
    base = _resolve(ref, depth + 1)
    if isinstance(base, DriftWorld):
        raise WorldError(f"world {name!r}: base: cannot extend a drifting world")
    own = {k: v for k, v in data.items() if k != "base"}
    return {**base.model_dump(exclude={"name", "source"}), **own}


def builtin_worlds() -> list[str]:
    """Names of the worlds shipped in the package (``agentsched/data/worlds/*.json``)."""
    root = resources.files("agentsched.data") / "worlds"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


@lru_cache(maxsize=16)
def _load_builtin(name: str) -> World:
    text = (resources.files("agentsched.data") / "worlds" / f"{name}.json").read_text()
    return parse_world(json.loads(text), name)


def _load_file(path: Path, depth: int) -> World:
    data = read_document(path, "world file", WorldError)
    name = data.get("name", path.stem) if isinstance(data, dict) else path.stem
    return parse_world(data, name if isinstance(name, str) and name else path.stem, path.parent, _depth=depth)


def perturbed(base: World, seed: int) -> World:
    """``base`` with every parameter scaled by an independent factor drawn log-uniformly from
    [1/3, 3] (``3 ** uniform(-1, 1)``) by ``random.Random(seed)``: the model-mismatch stress test.
    The law and the noise shape stay ``base``'s. Named ``perturbed:SEED`` for the default world,
    ``perturbed:SEED:BASE`` for another.

    Draw order (fixed, so a seed names one world): the tools of ``contention`` sorted by name,
    then the tags of ``defaults_by_tag`` sorted, then ``default``; sensitivity before pressure."""
    if isinstance(base, DriftWorld):
        raise WorldError(f"world {base.name!r}: cannot perturb a drifting world (drift between perturbed worlds)")
    rng = random.Random(seed)
    log_max = math.log(PERTURB_MAX_FACTOR)

    def scaled(c: Contention) -> dict[str, float]:
        s = c.sensitivity * math.exp(rng.uniform(-log_max, log_max))
        p = c.pressure * math.exp(rng.uniform(-log_max, log_max))
        return {"sensitivity": min(s, MAX_CONTENTION), "pressure": min(p, MAX_CONTENTION)}

    contention = {t: scaled(base.contention[t]) for t in sorted(base.contention)}
    by_tag = {t: scaled(base.defaults_by_tag[t]) for t in sorted(base.defaults_by_tag)}
    default = scaled(base.default)
    suffix = "" if base.name == DEFAULT_WORLD else f":{base.name}"
    return World.model_validate(
        {
            "name": f"{PERTURBED_PREFIX}{seed}{suffix}",
            "source": f"{base.name} with each sensitivity and pressure times 3**U(-1, 1) drawn by random.Random({seed})",
            "contention": contention,
            "defaults_by_tag": by_tag,
            "default": default,
            "law": base.law,
            "noise": base.noise,
            "vram": base.vram,
        }
    )


def understated(base: World, seed: int) -> World:
    """``base`` whose cards understate VRAM: ``VramUnderstatement(seed=seed)`` (about half the tools
    5-30% over their card). Named ``understated:SEED`` for the default world, ``understated:SEED:BASE``
    for another."""
    if isinstance(base, DriftWorld):
        raise WorldError(f"world {base.name!r}: cannot understate a drifting world's cards")
    suffix = "" if base.name == DEFAULT_WORLD else f":{base.name}"
    return base.model_copy(
        update={
            "name": f"{UNDERSTATED_PREFIX}{seed}{suffix}",
            "source": f"{base.name} with cards understating VRAM (seed {seed})",
            "vram": VramUnderstatement(seed=seed),
        }
    )


def load_world(ref: str | Path | World | None = None) -> World:
    """A world by built-in name (default ``a5500``), JSON file path, ``perturbed:SEED[:BASE]`` (the
    default world, or BASE, perturbed with that integer seed), or ``drift:A,B,ROUND`` (a
    ``DriftWorld``). One-line ``WorldError`` otherwise."""
    return _resolve(ref, 0)


def _resolve(ref: str | Path | World | None, depth: int) -> World:
    if isinstance(ref, World):
        return ref
    s = DEFAULT_WORLD if ref is None else str(ref)
    if s.startswith(PERTURBED_PREFIX):
        seed_text, _, base_ref = s[len(PERTURBED_PREFIX) :].partition(":")
        try:
            seed = int(seed_text)
        except ValueError:
            raise WorldError(f"world {s!r}: the seed after 'perturbed:' must be an integer") from None
        return perturbed(_resolve(base_ref or DEFAULT_WORLD, depth + 1), seed)
    if s.startswith(UNDERSTATED_PREFIX):
        seed_text, _, base_ref = s[len(UNDERSTATED_PREFIX) :].partition(":")
        try:
            seed = int(seed_text)
        except ValueError:
            raise WorldError(f"world {s!r}: the seed after 'understated:' must be an integer") from None
        return understated(_resolve(base_ref or DEFAULT_WORLD, depth + 1), seed)
    if s.startswith(DRIFT_PREFIX):
        return _parse_drift(s, depth)
    if s in builtin_worlds():
        return _load_builtin(s)
    path = Path(s)
    if not path.exists():
        raise WorldError(
            f"world {s!r} is neither a built-in world ({', '.join(builtin_worlds())}), "
            f"perturbed:SEED[:BASE], understated:SEED[:BASE], drift:A,B,ROUND, nor a file"
        )
    return _load_file(path, depth)


def _parse_drift(s: str, depth: int) -> DriftWorld:
    parts = s[len(DRIFT_PREFIX) :].split(",")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise WorldError(f"world {s!r}: expected drift:A,B,ROUND (two worlds without commas, a round)")
    a, b, round_text = (p.strip() for p in parts)
    try:
        switch = int(round_text)
    except ValueError:
        raise WorldError(f"world {s!r}: the round after the second comma must be an integer") from None
    if switch < 0:
        raise WorldError(f"world {s!r}: the switch round must be >= 0")
    return drift_world(_resolve(a, depth + 1), _resolve(b, depth + 1), switch)


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
