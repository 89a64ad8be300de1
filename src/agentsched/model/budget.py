"""The VRAM budget's one rule, with its one wording: a finite number of MB > 0, or none at all.

Why 0 is refused too: an unprofiled GPU tool's card holds the whole budget (never an overrun), so
0 MB made every such tool hold nothing and all of them ran ``gpu_now`` at once. Every place that
takes a budget (a workflow file, ``serve``, ``load``, the stream simulator) checks it here.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

FIELD_PROBLEM = "field_problem"  # a pydantic error type whose message is the problem as written here


def vram_budget_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a VRAM budget in MB (None: nothing; None is no budget)."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    if ok:
        return None
    shown = f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)
    return f"must be a finite number > 0 (none: omit it), got {shown}"


def _checked(value: Any) -> Any:
    problem = vram_budget_problem(value)
    if problem is not None:
        raise PydanticCustomError(FIELD_PROBLEM, problem)
    return value


# a pydantic field of a VRAM budget (MB): its error is ``vram_budget_problem``'s wording
VramBudgetMb = Annotated[float, BeforeValidator(_checked)]
