"""Tool cards: the offline profile of one tool, and card sets (one per machine).

A card set is a JSON file ``{"name", "source", "machine", "cards": {tool: card}}``. Amplified tools
``name_xK`` (K back-to-back calls of ``name``) need no card of their own: latency is K times the base
card's, VRAM and load time are the base tool's. A card set may still give an amplified card explicitly
(re-profiled), which then wins.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from agentsched.errors import CardError, validation_line
from agentsched.model.curves import CardCurves
from agentsched.model.files import read_document

# Sanity bounds: beyond them a card is a typo, and float time would overflow in the simulator.
MAX_MS = 1e9  # ~11.6 days for one call
MAX_VRAM_MB = 1e9
MIN_MS = 1e-6  # a curve's time is never 0: a zero-time task would tie every ordering
MAX_REPEAT = 1_000_000  # amplification K of name_xK times a task's repeat

_AMPLIFIED_RE = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")

CONTENTION_FIELDS = ("contention_sensitivity", "contention_pressure")  # moved to the simulated world


def split_amplified(tool: str) -> tuple[str, int]:
    """``("clip", 12)`` for ``clip_x12``; ``(tool, 1)`` for a name without the suffix."""
    m = _AMPLIFIED_RE.match(tool)
    return (m.group("base"), int(m.group("k"))) if m else (tool, 1)


def _reject_contention(card: Any, where: str) -> None:
    """One-line CardError for a card that still carries the simulator's contention parameters."""
    if isinstance(card, dict):
        found = [f for f in CONTENTION_FIELDS if f in card]
        if found:
            raise CardError(
                f"{where} carries {', '.join(found)}: GPU contention is not a card field any more "
                "(cards hold what a profiler measures); move it into a world file "
                "(see docs/simulator.md, 'The world')"
            )


class ToolCard(BaseModel):
    """Offline profile of one tool on one machine. Frozen: cards are inputs, never mutated."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)  # tool name, e.g. "clip" or "clip_x12"
    workload: str = ""  # one-line description shown to schedulers in cold start
    cpu_ms: float = Field(gt=0, le=MAX_MS)  # median latency of one call on the CPU, isolated
    gpu_ms: float | None = Field(default=None, gt=0, le=MAX_MS)  # same on the GPU; None: no GPU implementation
    load_ms: float | None = Field(default=None, ge=0, le=MAX_MS)  # model load-in paid by gpu_queue admission
    vram_mb: float | None = Field(default=None, ge=0, le=MAX_VRAM_MB)  # GPU memory held while on the GPU
    tags: tuple[str, ...] = ()  # e.g. compute-bound, memory-bound, compute-light, io-bound, neutral
    # the figures as curves of the invocation's input size; None: constant (cpu_ms etc. at every size)
    curves: CardCurves | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_contention(cls, v: Any) -> Any:
        _reject_contention(v, f"tool card {v.get('name', '?')!r}" if isinstance(v, dict) else "tool card")
        return v

    @model_validator(mode="after")
    def _gpu_figures_together(self) -> ToolCard:
        # why: a GPU card without vram_mb counted as 0 MB, so no budget ever held it back (vram_mb
        # without gpu_ms is harmless: a tool without a GPU implementation holds none, as ``show`` says)
        if self.gpu_ms is not None and self.vram_mb is None:
            raise ValueError(
                "gpu_ms without vram_mb: the VRAM a GPU placement holds must be known "
                "(vram_mb: 0 for a tool that holds none)"
            )
        if self.curves is not None and self.gpu_ms is None and (self.curves.gpu_ms or self.curves.vram_mb):
            raise ValueError("curves.gpu_ms or curves.vram_mb on a card without gpu_ms (no GPU implementation)")
        return self

    @field_validator("workload", mode="before")
    @classmethod
    def _one_line(cls, v: Any) -> Any:
        # why: it goes into the prompt's cards table and `show`; a newline broke the table's row
        return " ".join(v.split()) if isinstance(v, str) else v

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_tuple(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v

    @property
    def has_gpu(self) -> bool:
        """True when the tool has a GPU implementation (else a GPU placement runs host code)."""
        return self.gpu_ms is not None

    @property
    def speedup(self) -> float | None:
        """cpu_ms / gpu_ms, the paper's ratio; None without a GPU implementation."""
        return None if self.gpu_ms is None else self.cpu_ms / self.gpu_ms

    @property
    def vram_needed_mb(self) -> float:
        """VRAM a GPU placement holds (0 for tools without a GPU implementation)."""
        return (self.vram_mb or 0.0) if self.has_gpu else 0.0

    @property
    def load_needed_ms(self) -> float:
        """Load-in time a gpu_queue placement pays (0 without a GPU implementation)."""
        return (self.load_ms or 0.0) if self.has_gpu else 0.0

    # ---- figures at an invocation's size: the curve where the card has one, else the constant ---------------
    def cpu_ms_at(self, size: float | None) -> float:
        """CPU time of one call on inputs of ``size`` (None: size unknown, the constant)."""
        curve = self.curves.cpu_ms if self.curves is not None else None
        return self.cpu_ms if curve is None or size is None else max(curve.at(size), MIN_MS)

    def gpu_ms_at(self, size: float | None) -> float | None:
        """GPU time of one call on inputs of ``size``; None without a GPU implementation."""
        curve = self.curves.gpu_ms if self.curves is not None else None
        if self.gpu_ms is None or curve is None or size is None:
            return self.gpu_ms
        return max(curve.at(size), MIN_MS)

    def vram_mb_at(self, size: float | None) -> float:
        """VRAM a GPU placement holds on inputs of ``size`` (0 without a GPU implementation)."""
        curve = self.curves.vram_mb if self.curves is not None else None
        return self.vram_needed_mb if curve is None or size is None or not self.has_gpu else curve.at(size)

    def amplified(self, k: int) -> ToolCard:
        """Card of K back-to-back calls: latency x K; VRAM and load unchanged."""
        if k < 1:
            raise CardError(f"repeat must be >= 1, got {k} for tool {self.name!r}")
        if k == 1:
            return self
        return self.model_copy(
            update={
                "name": f"{self.name}_x{k}",
                "cpu_ms": self.cpu_ms * k,
                "gpu_ms": None if self.gpu_ms is None else self.gpu_ms * k,
                "curves": None if self.curves is None else self.curves.scaled(k),
                "workload": f"{self.workload} (x{k})" if self.workload else f"x{k}",
            }
        )


class CardSet(BaseModel):
    """A named set of tool cards measured on one machine."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str  # e.g. "a5500", "h200", or a file stem
    source: str = ""  # where the figures come from (paper table, profiler run)
    machine: dict[str, Any] = Field(default_factory=dict)  # CPU/GPU/versions/load average
    cards: dict[str, ToolCard]

    @field_validator("cards", mode="before")
    @classmethod
    def _names_from_keys(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, dict):
            out = {}
            for key, card in v.items():
                _reject_contention(card, f"card set {info.data.get('name', '?')!r}: tool {key!r}")
                if isinstance(card, dict) and "name" not in card:
                    card = {**card, "name": key}
                elif isinstance(card, dict) and card["name"] != key:  # a hand edit's slip: whose figures are these?
                    raise ValueError(
                        f"tool {key!r}: its card is named {card['name']!r}; a card's name is its "
                        "tool's (leave the name out, or make it the key)"
                    )
                out[key] = card
            return out
        return v

    def tool_names(self) -> list[str]:
        return list(self.cards)

    def has_tool(self, tool: str) -> bool:
        try:
            self.resolve(tool)
        except CardError:
            return False
        return True

    def resolve(self, tool: str, repeat: int = 1) -> ToolCard:
        """Card for ``repeat`` calls of ``tool`` (which may itself be ``name_xK``)."""
        if repeat < 1:
            raise CardError(f"repeat must be >= 1, got {repeat} for tool {tool!r}")
        base, k = tool, 1
        if tool not in self.cards:
            m = _AMPLIFIED_RE.match(tool)
            if m is None or m.group("base") not in self.cards:
                raise CardError(
                    f"unknown tool {tool!r} in card set {self.name!r} (known: {', '.join(sorted(self.cards))})"
                )
            base, k = m.group("base"), int(m.group("k"))
        total_k = k * repeat
        if total_k > MAX_REPEAT:
            raise CardError(f"tool {tool!r} x {repeat}: amplification {total_k} exceeds {MAX_REPEAT:,}")
        explicit = f"{base}_x{total_k}"
        if total_k > 1 and explicit in self.cards:
            return self.cards[explicit]
        return self.cards[base].amplified(total_k)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


def parse_card_set(data: Any, name: str, where: str | None = None) -> CardSet:
    """Validate a decoded card-set document; raise CardError with a one-line reason, naming
    ``where`` it came from (a file: its own ``name`` may be a built-in set's, e.g. a copy) else ``name``."""
    what = where or f"card set {name!r}"
    if not isinstance(data, dict) or "cards" not in data:
        raise CardError(f"{what}: expected an object with a 'cards' mapping")
    data = {"name": name, **data}
    try:
        return CardSet.model_validate(data)
    except ValidationError as e:
        raise CardError(f"{what}: {validation_line(e.errors())}") from None


def builtin_card_sets() -> list[str]:
    """Names of the card sets shipped in the package (``agentsched/data/cards/*.json``)."""
    root = resources.files("agentsched.data") / "cards"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


@lru_cache(maxsize=32)
def _load_builtin(name: str) -> CardSet:
    text = (resources.files("agentsched.data") / "cards" / f"{name}.json").read_text()
    return parse_card_set(json.loads(text), name)


def load_card_set(name_or_path: str | Path) -> CardSet:
    """A built-in card set by name (e.g. ``a5500``) or a JSON file path."""
    s = str(name_or_path)
    if s in builtin_card_sets():
        return _load_builtin(s)
    path = Path(s)
    if not path.exists():
        raise CardError(f"card set {s!r} is neither a built-in set ({', '.join(builtin_card_sets())}) nor a file")
    data = read_document(path, "card file", CardError)
    return parse_card_set(
        data, data.get("name", path.stem) if isinstance(data, dict) else path.stem, f"card file {path}"
    )
