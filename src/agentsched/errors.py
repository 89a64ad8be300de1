"""Error types. Every user-facing failure is an ``AgentschedError`` whose message is one line that
names the problem; the CLI prints it without a traceback and exits non-zero."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentsched.masking import mask_secrets, printable


class AgentschedError(Exception):
    """Base class of every error agentsched reports to a user as one line."""


class FieldError(AgentschedError):
    """A declared value refused where it is validated (a pydantic model): ``field`` names it and
    ``problem`` says what is wrong, so a caller can name the field its own way (the CLI: by its
    flag, ``cli/common.py``) without reading the message's text."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem

    def renamed(self, name: str) -> FieldError:
        """The same error (its class too) with the field called ``name``."""
        return type(self)(name, self.problem)

    @classmethod
    def from_validation(cls, errors: Sequence[Mapping[str, Any]]) -> FieldError:
        """The first of pydantic's errors (``ValidationError.errors()``) as this class: its field is
        the error's location (dotted), its problem pydantic's message and the value given."""
        first = errors[0] if errors else {}
        field = ".".join(str(p) for p in first.get("loc", ())) or "value"
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if first.get("type") == "field_problem":  # written as a problem already (model/budget.py)
            return cls(field, msg)
        msg = msg[:1].lower() + msg[1:]
        given = first.get("input")
        shown = printable(repr(given)[:80]) if not isinstance(given, dict) else "an object"
        return cls(field, f"is invalid ({msg}), got {shown}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a supervisor, ``timeout``), raised where Ctrl-C's ``KeyboardInterrupt`` is: a command
    stops its runs and records them as it does for Ctrl-C (``cli/main.py``)."""


class CardError(AgentschedError):
    """A tool card or card set is malformed, missing or unknown."""


class WorkflowError(AgentschedError):
    """A workflow file is malformed: YAML/JSON syntax, cycles, unknown tools or tasks, bad budget."""


class MappingError(AgentschedError):
    """A mapping misses a task, names an unknown task, or uses a mode outside the decision space."""


class TestbedError(AgentschedError):
    """A testbed cannot execute the request (e.g. GPU mode on a machine without CUDA)."""

    __test__ = False  # not a pytest test class


class WorldError(AgentschedError):
    """A simulated world (GPU contention parameters) is malformed, missing or unknown."""


class PolicyError(AgentschedError):
    """Unknown policy name or invalid policy option."""


class ToolError(AgentschedError):
    """A tool cannot be built or run: unknown name or size, an import path that does not import,
    a class that is not an ``agentsched.Tool``, a missing extra."""


class StoreError(AgentschedError):
    """The persistent store cannot be used: locked, read-only, corrupt, or from a newer schema."""

    transient = False  # True: it may take the same write later (locked by another process, full, read-only)


def validation_line(errors: Sequence[Mapping[str, Any]], default_loc: str = "", *, more: bool = True) -> str:
    """The first of pydantic's validation errors (``ValidationError.errors()``, FastAPI's too) as
    one line: ``where.it.is: what`` (``default_loc`` when it has no place), ``(+N more)``."""
    if not errors:
        return default_loc or "invalid"
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or default_loc
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "missing":  # a key missing beside an unknown one is most often a typo of it
        parent = tuple(first.get("loc", ()))[:-1]
        unknown = [
            str(e["loc"][-1])
            for e in errors
            if e.get("type") == "extra_forbidden" and tuple(e.get("loc", ()))[:-1] == parent and e.get("loc")
        ]
        if unknown:
            msg += f" (an unknown key {unknown[0]!r} was given: misspelt?)"
    extra = f" (+{len(errors) - 1} more)" if more and len(errors) > 1 else ""
    return f"{loc}: {msg}{extra}" if loc else f"{msg}{extra}"


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception: how a foreign error (a tool's, a
    library's) is quoted inside an agentsched one-line message; URL credentials and secret keys'
    values masked, terminal control escaped (``masking.py``). Why: a tool's error quoting its
    connection string was printed, stored and served as it was, ESC sequences included."""
    text = str(exc).strip().splitlines()
    return printable(mask_secrets(f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")))


def address_secrets(address: str) -> tuple[str, ...]:
    """The credentials a cluster address carries before its ``@``, with a scheme or without one
    (``user:password@host:port``): the whole user info and each part, for masking in messages."""
    rest = address.split("://", 1)[-1]  # (a cluster address has no path: a '/' before '@' is the password's)
    userinfo, at, _ = rest.rpartition("@")
    if not at or not userinfo:
        return ()
    return tuple(dict.fromkeys(p for p in (userinfo, *userinfo.split(":", 1)) if p))


def redact_address(address: str) -> str:
    """``address`` with its credentials (``user:password@``) shown as ``***@``."""
    for secret in address_secrets(address)[:1]:  # the whole user info: its parts are inside it
        address = address.replace(f"{secret}@", "***@", 1)
    return address
