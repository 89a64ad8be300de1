"""A request's JSON body, read within its cap and parsed off the event loop.

The body is read only after the token was checked (a route's body is a dependency after the
router's ``authorize``), a declared ``Content-Length`` over the cap is answered 413 before a byte
of it is read (a body without one is read up to the cap, then 413), and parsing and validation
run in a worker thread: a large body never stalls ``/healthz``. An object with a key given twice is
refused, as workflow files refuse it (JSON parsers otherwise keep the last silently).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from pydantic import BaseModel, ValidationError

from agentsched.errors import one_line, validation_line
from agentsched.masking import printable

M = TypeVar("M", bound=BaseModel)


class DuplicateKeyError(ValueError):
    """A JSON object of the body names one key twice."""


def check_length(request: Request, max_bytes: int) -> None:
    """413 when the declared length is over ``max_bytes`` (nothing read yet)."""
    declared = request.headers.get("content-length")
    if declared is None:
        return
    try:
        length = int(declared)
    except ValueError:
        raise HTTPException(400, "the Content-Length header is not a number") from None
    if length > max_bytes:
        raise HTTPException(413, too_large(max_bytes, f"{length:,} bytes"))


def too_large(max_bytes: int, size: str) -> str:
    return f"the request body is {size}, over the cap of {max_bytes:,} bytes (serve --max-body-mb)"


async def read_capped(request: Request, max_bytes: int) -> bytes:
    """The body, at most ``max_bytes`` of it (413 past them)."""
    check_length(request, max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise HTTPException(413, too_large(max_bytes, "longer"))
        chunks.append(chunk)
    return b"".join(chunks)


def _one_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def parse(raw: bytes, content_type: str, model: type[M]) -> M:
    """``raw`` as ``model`` (blocking: run it in a worker thread); ``HTTPException`` with one line
    for a body that is missing, not JSON, not UTF-8, too deep, with a key twice, or not the model."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not raw.strip():
        raise HTTPException(422, "the request body is missing: send a JSON object (content-type: application/json)")
    if media != "application/json" and not media.endswith("+json"):
        # curl's -d alone sends a form's content type: say what to change
        got = f"content-type {printable(media[:80])!r}" if media else "no content-type"
        raise HTTPException(415, f"the request body must be JSON (content-type: application/json), got {got}")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_one_each)
    except UnicodeDecodeError:
        raise HTTPException(422, "the request body is not valid JSON: it is not UTF-8") from None
    except RecursionError:
        raise HTTPException(422, "the request body cannot be read: it is nested too deep") from None
    except DuplicateKeyError as e:
        key = printable(str(e.args[0])[:80])
        raise HTTPException(
            422, f"the request body names the key {key!r} twice in one object (each key once)"
        ) from None
    except json.JSONDecodeError as e:
        raise HTTPException(
            422, f"the request body is not valid JSON: {e.msg} (line {e.lineno} column {e.colno})"
        ) from None
    except ValueError as e:  # Python's int-string conversion limit
        if "digits" in str(e):
            limit = sys.get_int_max_str_digits()
            raise HTTPException(
                422, f"the request body cannot be read: a number in it has more than {limit} digits"
            ) from None
        raise HTTPException(422, f"the request body cannot be read: {one_line(e)}") from None
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        errors = [{**err, "loc": ("body", *err.get("loc", ()))} for err in e.errors()]
        raise HTTPException(422, validation_line(errors)) from None
