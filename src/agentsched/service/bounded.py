"""What the service answers, as JSON that always encodes and has a bound.

A tool's output can be anything: cyclic, nested thousands deep, an integer JSON libraries refuse
(more than ``sys.get_int_max_str_digits()`` digits), a string holding a lone surrogate (UTF-8
cannot encode it), an object whose ``repr`` raises, or hundreds of MB. ``bounded`` walks it once
within a byte budget and a depth, and replaces what cannot be sent with a *marked* value: a
marker object ``{"$cut": "why"}``, or a string cut short that ends with ``... [cut: why]``; each
replacement's place and reason is listed. So an executed invocation is always answered (200,
with its id), never with a plain-text 500 after it was recorded.
"""

from __future__ import annotations

import json
import math
import reprlib
import sys
from collections.abc import Mapping
from typing import Any

MARK = "$cut"  # the key of a marker object
MAX_DEPTH = 64  # containers nested deeper are replaced by a marker
MAX_CUTS_LISTED = 20  # places listed in an answer's `cut` (the rest counted)
PREVIEW_CHARS = 200  # of an object shown by its repr
LOG2_10 = math.log2(10)


class Walk:
    """One bounded walk: the bytes left and the places cut."""

    def __init__(self, max_bytes: int, unit: str = "bytes") -> None:
        self.left = max_bytes
        self.max_bytes = max_bytes
        self.cap = f"the cap of {max_bytes:,} {unit}"
        self.cuts: list[str] = []
        self.cut_count = 0

    def cut(self, where: str, why: str) -> dict[str, str]:
        self.cut_count += 1
        if len(self.cuts) < MAX_CUTS_LISTED:
            self.cuts.append(f"{where}: {why}")
        return {MARK: why}

    def listed(self) -> list[str]:
        more = self.cut_count - len(self.cuts)
        return self.cuts + ([f"(+{more} more)"] if more > 0 else [])

    def value(self, v: Any, where: str, depth: int, path: frozenset[int]) -> Any:
        if v is None or isinstance(v, bool):
            self.left -= 5
            return v
        if isinstance(v, int):
            return self._int(v, where)
        if isinstance(v, float):
            self.left -= 24
            return v if math.isfinite(v) else None  # JSON has no NaN or infinity
        if isinstance(v, str):
            return self.text(v, where)
        if self.left <= 0:
            return self.cut(where, f"over {self.cap}")
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            if depth >= MAX_DEPTH:
                return self.cut(where, f"nested deeper than {MAX_DEPTH}")
            if id(v) in path:
                return self.cut(where, "cyclic: it contains itself")
            return self._container(v, where, depth + 1, path | {id(v)})
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self.cut(where, f"{len(v):,} bytes of binary data (not JSON)")
        return self._other(v, where)

    def _int(self, v: int, where: str) -> Any:
        limit = sys.get_int_max_str_digits()
        digits = abs(v).bit_length() / LOG2_10
        if limit and digits > limit - 1:  # (a bound from the bit length: str() itself would raise)
            return self.cut(where, f"an integer of about {int(digits):,} digits (more than {limit:,})")
        self.left -= int(digits) + 2
        return v

    def text(self, s: str, where: str) -> str:
        """``s`` within the budget, a lone surrogate replaced (U+FFFD), marked when changed."""
        room = max(self.left, 0)
        out = s
        if len(out) > room:  # (characters as bytes: a bound, exact for ASCII)
            out = out[:room] + f"... [cut: {len(s):,} characters, over {self.cap}]"
            self.cut(where, f"a text of {len(s):,} characters cut")
        try:
            out.encode("utf-8")
        except UnicodeEncodeError:
            out = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in out)
            self.cut(where, "a lone surrogate (not UTF-8) replaced by U+FFFD")
        self.left -= len(out) + 2
        return out

    def _container(self, v: Any, where: str, depth: int, path: frozenset[int]) -> Any:
        if isinstance(v, Mapping):
            out: dict[str, Any] = {}
            for i, (k, item) in enumerate(v.items()):
                if self.left <= 0:
                    out[MARK] = self.cut(where, f"{len(v) - i:,} more key(s) over the cap")[MARK]
                    break
                key = k if isinstance(k, str) else self._key(k)
                key = self.text(key, f"{where} key")
                out[key] = self.value(item, f"{where}.{key[:40]}", depth, path)
            return out
        items = list(v) if isinstance(v, (set, frozenset)) else v
        seq: list[Any] = []
        for i, item in enumerate(items):
            if self.left <= 0:
                seq.append(self.cut(f"{where}[{i}]", f"{len(items) - i:,} more item(s) over the cap"))
                break
            seq.append(self.value(item, f"{where}[{i}]", depth, path))
        return seq

    def _key(self, k: Any) -> str:
        try:
            return str(k)
        except Exception:  # noqa: BLE001 - a key whose __str__ raises
            return f"<key of type {type(k).__name__}>"

    def _other(self, v: Any, where: str) -> Any:
        """Anything else: shown by its (bounded) repr, marked; an object whose repr raises, marked so."""
        try:  # (reprlib would hide a raising repr behind "<X instance at ...>")
            shown = short_repr(v)
        except Exception as e:  # noqa: BLE001 - a user's object's repr
            return self.cut(where, f"a {type(v).__name__} whose repr raised {type(e).__name__}")
        marker = self.cut(where, f"a {type(v).__name__}, not JSON: shown by its repr")
        marker["repr"] = self.text(shown[: PREVIEW_CHARS * 2], where)
        return marker


def short_repr(v: Any) -> str:
    """``repr(v)`` cut to a preview (builtin containers shortened as they are walked)."""
    if isinstance(v, (dict, list, tuple, set, frozenset, str, bytes)):
        short = reprlib.Repr()
        short.maxstring = short.maxother = PREVIEW_CHARS
        return short.repr(v)
    text = repr(v)
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def bounded(value: Any, max_bytes: int, where: str = "outputs") -> tuple[Any, list[str]]:
    """``value`` as JSON data within about ``max_bytes`` (see the module docstring), and the places cut."""
    walk = Walk(max_bytes)
    out = walk.value(value, where, 0, frozenset())
    return out, walk.listed()


def bounded_text(text: str | None, max_chars: int) -> tuple[str | None, bool]:
    """An error text within ``max_chars``, lone surrogates replaced; True when it was changed."""
    if text is None:
        return None, False
    walk = Walk(max_chars, "characters")
    out = walk.text(text, "message")
    return out, bool(walk.cut_count)


def jsonable(value: Any, max_bytes: int = 64 * 1024 * 1024) -> Any:
    """``value`` as JSON data (``bounded``, the places cut dropped): for callers that print it."""
    return bounded(value, max_bytes)[0]


def dumps(doc: Any) -> bytes:
    """``doc`` (already bounded) as UTF-8 JSON."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
