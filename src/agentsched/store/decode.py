"""Reading a store's JSON columns back: a row that is not what agentsched wrote (a damaged file, a
hand edit) is a ``RowError`` naming the row and the problem, which the store turns into its one-line
``StoreError`` naming the file; never a ``JSONDecodeError``/``KeyError`` from deep inside."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode

T = TypeVar("T")
_MODES = frozenset(m.value for m in Mode)
_STATUSES = frozenset(s.value for s in Status)


class RowError(ValueError):
    """A stored row that cannot be read (the message: which row, what is wrong)."""


def loads_object(text: Any, what: str) -> dict[str, Any]:
    """The JSON object in ``text`` (``what``: the row's name in the message)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError) as e:
        raise RowError(f"{what} is not JSON ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise RowError(f"{what} is a JSON {type(value).__name__}, not an object")
    return value


def mapping(text: Any, what: str) -> dict[str, str]:
    """A stored mapping: task -> mode value."""
    m = loads_object(text, what)
    bad = next((k for k, v in m.items() if v not in _MODES), None)
    if bad is not None:
        raise RowError(f"{what} places task {bad[:80]!r} on {str(m[bad])[:40]!r}, not a mode")
    return m


def status(value: Any, what: str) -> str:
    if value not in _STATUSES:
        raise RowError(f"{what} has status {str(value)[:40]!r}")
    return str(value)


def e2e(value: Any, what: str) -> float | None:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
        return value
    raise RowError(f"{what} has E2E {str(value)[:40]!r}, not a number")


def execution(text: Any, what: str, from_doc: Callable[[dict[str, Any]], Execution]) -> Execution:
    """A stored execution record through ``from_doc``; a missing field or a wrong-typed value is a RowError."""
    doc = loads_object(text, what)
    try:
        return from_doc(doc)
    except KeyError as e:
        raise RowError(f"{what} has no field {e}") from None
    except (TypeError, ValueError, IndexError) as e:
        raise RowError(f"{what} holds a wrong value ({type(e).__name__}: {str(e)[:80]})") from None
