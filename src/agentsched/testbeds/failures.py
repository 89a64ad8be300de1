"""What a failure of host code means: a CUDA out of memory, a timeout, or a failure of something
outside the workflow (which no placement of the tools can cause). Every testbed judges its runs'
exceptions here."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable


def is_oom(exc: BaseException) -> bool:
    """A real CUDA out-of-memory (torch's error type, or its message on older versions). Never
    imports torch: an exception of torch's type means torch is loaded already."""
    torch = sys.modules.get("torch")
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if isinstance(oom_type, type) and isinstance(exc, oom_type):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower()


# exception types (by class name, anywhere in the type's MRO: the openai, httpx and requests types
# need no import) that say a service outside the workflow failed: refused, unreachable, overloaded
_EXTERNAL_NAMES = re.compile(r"Connect|RateLimit|ServiceUnavailable|InternalServerError|NameResolution")


def is_timeout(exc: BaseException) -> bool:
    """A timeout (Python's, or a library's by its type's name: httpx's ReadTimeout, openai's APITimeoutError)."""
    return isinstance(exc, TimeoutError) or any("Timeout" in c.__name__ for c in type(exc).__mro__)


def is_external(exc: BaseException) -> bool:
    """Did host code fail because something outside the workflow did (a connection refused or reset,
    an endpoint rate-limiting or answering 5xx, a missing file)? No placement of the tools can cause
    that. Timeouts are not counted: a placement that slows a service sharing the GPU can cause one."""
    if is_timeout(exc):
        return False
    return isinstance(exc, OSError) or any(_EXTERNAL_NAMES.search(c.__name__) for c in type(exc).__mro__)


def host_failure_external(exc: BaseException, ran_s: tuple[float, float], placed_starts_s: Iterable[float]) -> bool:
    """Can no placement have caused host code's failure ``exc`` (it ran over ``ran_s``, start and
    end)? So when ``is_external``, or when it ended before any placed task started (it took no
    tool's output and ran beside none), unless it ran out of memory or timed out."""
    if is_external(exc):
        return True
    return not is_oom(exc) and not is_timeout(exc) and all(s >= ran_s[1] for s in placed_starts_s)
