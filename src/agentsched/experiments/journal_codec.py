"""The run journal's row format: a finished run as plain JSON, never a pickle.

A row holds only JSON values plus tagged objects of a fixed allowlist of agentsched record types
(dataclasses and enums, rebuilt from their fields); a workflow is stored by name and rebuilt from
the caller's own workflows. Decoding never imports or calls anything named by the row: a tag
outside the allowlist, a missing or extra field, a wrong-typed value is a ``JournalRowError``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

ROW_FORMAT = "json-zlib-2"  # written to the journal's meta table; bump when the row layout changes
MAX_DEPTH = 64  # our records nest under 12 levels; a deeper row is crafted, not ours


class JournalRowError(ValueError):
    """A journal row that is not a valid record (the message names the problem)."""


@cache
def _types() -> dict[str, type]:
    """Every record type a row may hold, by tag. Imported here, as only a row needs them."""
    from agentsched.experiments.bench_records import BenchRecord
    from agentsched.loop.metrics import RunMetrics
    from agentsched.loop.runner import LoopRun, RoundRecord
    from agentsched.model.execution import Execution, Status, TaskSpan
    from agentsched.model.rounds import RoundResult
    from agentsched.model.workflow import Mode

    kinds = (BenchRecord, RunMetrics, LoopRun, RoundRecord, Execution, Status, TaskSpan, RoundResult, Mode)
    return {k.__name__: k for k in kinds}


def encode(value: Any) -> str:
    """``value`` as one JSON text (TypeError for a type outside the allowlist)."""
    return json.dumps(_enc(value), separators=(",", ":"))


def _enc(v: Any) -> Any:
    from agentsched.model.workflow import Workflow

    if v is None or isinstance(v, (bool, int, float, str)) and not isinstance(v, enum.Enum):
        return v
    kind = _types().get(type(v).__name__)
    if kind is type(v) and isinstance(v, enum.Enum):
        return {"$enum": kind.__name__, "value": v.value}
    if kind is type(v) and dataclasses.is_dataclass(v):
        return {"$rec": kind.__name__, "fields": {f.name: _enc(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    if isinstance(v, Workflow):
        return {"$workflow": v.name}
    if isinstance(v, (list, tuple)):
        return {"$tuple": [_enc(x) for x in v]} if isinstance(v, tuple) else [_enc(x) for x in v]
    if isinstance(v, dict):  # as pairs: keys may be enums or numbers, and order is kept
        return {"$dict": [[_enc(k), _enc(x)] for k, x in v.items()]}
    raise TypeError(f"{type(v).__name__} cannot be journaled")


def decode(text: str | bytes, workflows: Mapping[str, Any] | None = None) -> Any:
    """The value ``encode`` wrote; ``workflows`` by name for the workflows a row names."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise JournalRowError(f"not a JSON record ({type(e).__name__})") from None
    return _dec(doc, workflows or {}, 0)


def _dec(v: Any, workflows: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise JournalRowError(f"nested deeper than {MAX_DEPTH} levels")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_dec(x, workflows, depth + 1) for x in v]
    if not isinstance(v, dict) or len(v) not in (1, 2):
        raise JournalRowError(f"unexpected {type(v).__name__} object")
    if set(v) == {"$tuple"} and isinstance(v["$tuple"], list):
        return tuple(_dec(x, workflows, depth + 1) for x in v["$tuple"])
    if set(v) == {"$dict"} and isinstance(v["$dict"], list):
        return _dec_dict(v["$dict"], workflows, depth)
    if set(v) == {"$workflow"}:
        if not isinstance(v["$workflow"], str) or v["$workflow"] not in workflows:
            raise JournalRowError(f"names workflow {str(v['$workflow'])[:80]!r}, which this run does not have")
        return workflows[v["$workflow"]]
    if set(v) == {"$enum", "value"}:
        kind = _kind(v["$enum"], enum.Enum)
        try:
            return kind(v["value"])
        except ValueError:
            raise JournalRowError(f"{kind.__name__} has no value {str(v['value'])[:80]!r}") from None
    if set(v) == {"$rec", "fields"} and isinstance(v["fields"], dict):
        return _dec_record(_kind(v["$rec"], None), v["fields"], workflows, depth)
    raise JournalRowError(f"unexpected object with keys {sorted(v)[:5]}")


def _dec_dict(pairs: list[Any], workflows: Mapping[str, Any], depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for p in pairs:
        if not isinstance(p, list) or len(p) != 2:
            raise JournalRowError("a dict entry is not a [key, value] pair")
        key = _dec(p[0], workflows, depth + 1)
        try:
            out[key] = _dec(p[1], workflows, depth + 1)
        except TypeError:  # an unhashable key (a list)
            raise JournalRowError("a dict key is not hashable") from None
    return out


def _kind(tag: Any, base: type | None) -> type:
    kind = _types().get(tag) if isinstance(tag, str) else None
    if kind is None or (base is not None) != issubclass(kind, enum.Enum):
        raise JournalRowError(f"unknown record type {str(tag)[:80]!r}")
    return kind


def _dec_record(kind: type, fields: dict[str, Any], workflows: Mapping[str, Any], depth: int) -> Any:
    names = {f.name for f in dataclasses.fields(kind)}
    if not set(fields) <= names:
        raise JournalRowError(f"{kind.__name__} has no field {sorted(set(fields) - names)[0]!r}")
    values = {k: _dec(x, workflows, depth + 1) for k, x in fields.items()}
    hints = _hints(kind)
    for k, x in values.items():
        if not fits(x, hints[k]):
            raise JournalRowError(f"{kind.__name__}.{k} is a {type(x).__name__}, not {hints[k]}")
    try:
        return kind(**values)
    except TypeError as e:  # a required field missing
        raise JournalRowError(f"{kind.__name__}: {e}") from None


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names (elements too; what cannot be checked passes)."""
    if hint is Any:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return isinstance(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if origin in (list, tuple, dict) and not isinstance(value, origin):
        return False
    if origin is list:
        return all(fits(x, args[0]) for x in value)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return all(fits(x, args[0]) for x in value)
    if origin is tuple:
        return len(value) == len(args) and all(fits(x, a) for x, a in zip(value, args, strict=False))
    if origin is dict:
        return all(fits(k, args[0]) and fits(x, args[1]) for k, x in value.items())
    return True
