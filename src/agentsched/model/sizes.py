"""The size of one invocation's inputs to a tool, computed before placement and recorded with its execution.

A tool may declare ``size(inputs) -> float`` and ``size_unit`` (seconds of audio, pages, tokens, pixels...);
the default is the inputs' byte length (``byte_size``). ``measure_size`` calls the tool's and never raises:
a tool whose ``size`` fails, or returns something that is not a finite number >= 0, gets the byte length,
marked (``InputSize.fallback``), so a cost curve in the tool's unit is never read at a size in bytes
without the caller being able to tell.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsched.errors import one_line
from agentsched.model.curves import MAX_SIZE

BYTES = "bytes"  # the default size unit
MAX_ITEMS = 10_000  # container elements walked; past it, the rest are counted as the average walked
MAX_DEPTH = 8  # nesting walked; deeper values count by their shallow size
DEFAULT_SIZE_MARK = "_agentsched_default_size"  # set on Tool.size: the tool declares no size of its own


@dataclass(frozen=True, slots=True)
class InputSize:
    """One invocation's input size to one tool."""

    value: float  # the size, finite, in [0, MAX_SIZE]
    unit: str  # the tool's size unit, or "bytes"
    exact: bool = True  # False: some input could not be encoded and was counted approximately
    fallback: str = ""  # why the tool's own size() was not used ("" when it was, or when it has none)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"size": round(self.value, 6), "size_unit": self.unit}
        if not self.exact:
            out["size_exact"] = False
        if self.fallback:
            out["size_fallback"] = self.fallback
        return out


class _Walk:
    """Byte counting with a budget of elements and depth; remembers whether it had to approximate."""

    def __init__(self) -> None:
        self.items = 0
        self.exact = True

    def size(self, value: Any, depth: int = 0) -> float:
        self.items += 1
        if value is None or isinstance(value, bool):
            return 1.0 if isinstance(value, bool) else 0.0
        if isinstance(value, (bytes, bytearray, memoryview)):
            return float(len(value) if not isinstance(value, memoryview) else value.nbytes)
        if isinstance(value, str):
            return float(len(value.encode("utf-8", "surrogatepass")))
        if isinstance(value, (int, float, complex)):
            return 8.0 if not isinstance(value, int) or abs(value) < 2**63 else float((value.bit_length() + 7) // 8)
        nbytes = getattr(value, "nbytes", None)  # numpy arrays (and torch tensors, below)
        if isinstance(nbytes, (int, float)) and not isinstance(nbytes, bool) and math.isfinite(nbytes):
            return float(nbytes)
        if hasattr(value, "element_size") and hasattr(value, "nelement"):
            try:
                return float(value.element_size() * value.nelement())
            except Exception:  # noqa: BLE001 - a tensor-like object of the user's: counted approximately below
                pass
        if isinstance(value, Mapping):
            return self._many(list(itertools.islice(value.items(), MAX_ITEMS + 1)), len(value), depth)
        if isinstance(value, (list, tuple)):
            return self._many(value[: MAX_ITEMS + 1], len(value), depth)
        if isinstance(value, (set, frozenset)):
            return self._many(list(itertools.islice(value, MAX_ITEMS + 1)), len(value), depth)
        return self._opaque(value)

    def _many(self, walked: Any, total: int, depth: int) -> float:
        if depth >= MAX_DEPTH:
            self.exact = False
            return float(sys.getsizeof(walked))
        got, count = 0.0, 0
        for item in walked:
            if self.items >= MAX_ITEMS:
                self.exact = False
                break
            got += self.size(item, depth + 1)  # a mapping's (key, value) pairs: both counted
            count += 1
        if count < total:  # the rest counted as the average of those walked
            self.exact = False
            got += (got / count if count else 8.0) * (total - count)
        return got

    def _opaque(self, value: Any) -> float:
        """An object with no byte form: the length of its repr, bounded, marked approximate."""
        self.exact = False
        try:
            return float(min(len(repr(value)), 1_000_000))
        except Exception:  # noqa: BLE001 - a user object whose repr raises
            return float(sys.getsizeof(value, 64))


def byte_size(inputs: Any) -> InputSize:
    """The inputs' byte length (strings as UTF-8, arrays by their buffers, containers summed), bounded
    (``MAX_ITEMS`` elements, ``MAX_DEPTH`` levels, at most ``MAX_SIZE``); never raises."""
    walk = _Walk()
    try:
        value = walk.size(inputs)
    except Exception:  # noqa: BLE001 - odd user values (a __len__ that raises...): a marked estimate
        walk.exact, value = False, 0.0
    if not math.isfinite(value):
        walk.exact, value = False, MAX_SIZE
    return InputSize(value=min(max(value, 0.0), MAX_SIZE), unit=BYTES, exact=walk.exact)


def measure_size(tool: Any, inputs: Mapping[str, Any] | None) -> InputSize:
    """The size of ``inputs`` to ``tool`` (a Tool instance or class) in its unit: its ``size(inputs)``
    when it declares one and that gives a finite number >= 0, else the byte length, marked. Never raises."""
    inputs = inputs if inputs is not None else {}
    unit = getattr(tool, "size_unit", BYTES)
    unit = unit if isinstance(unit, str) and unit.strip() else BYTES
    fn = getattr(tool, "size", None)
    if not callable(fn) or getattr(fn, DEFAULT_SIZE_MARK, False):
        return byte_size(inputs)
    if isinstance(tool, type):
        got = byte_size(inputs)
        return InputSize(value=got.value, unit=BYTES, exact=got.exact, fallback="a tool class, not an instance")
    try:
        value = fn(inputs)
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        why = "" if ok else f"size() returned {value!r:.40} (not a finite number >= 0)"
    except Exception as e:  # noqa: BLE001 - user code: its failure becomes a marked fallback, not a traceback
        ok, why = False, f"size() raised {one_line(e)}"[:200]
    if not ok:
        got = byte_size(inputs)
        return InputSize(value=got.value, unit=BYTES, exact=got.exact, fallback=why)
    return InputSize(value=min(float(value), MAX_SIZE), unit=unit)
