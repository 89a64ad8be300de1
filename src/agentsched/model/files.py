"""Reading the small documents a user gives (card sets, workflows, worlds): one home for how a file
that cannot be read or decoded becomes a one-line error naming the file and the problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError

MAX_INPUT_BYTES = 16 * 1024 * 1024  # workflow and card files are small; refuse devices and huge files


def read_small_text(path: Path, kind: str) -> str:
    """A regular, UTF-8 file of at most MAX_INPUT_BYTES; ValueError with a one-line reason otherwise."""
    try:
        if not path.is_file():
            raise ValueError(f"{kind} {path}: {'not a regular file' if path.exists() else 'does not exist'}")
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise ValueError(f"{kind} {path}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{kind} {path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"{kind} {path}: {e.strerror}") from None


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``json.loads`` would keep the last silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"duplicate key {k!r}")
        out[k] = v
    return out


def loads_json_unique(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys in any object (DuplicateKeyError)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def read_document(
    path: Path,
    kind: str,
    error: type[AgentschedError],
    *,
    where: str | None = None,
    parse: Callable[[str], Any] = loads_json_unique,
) -> Any:
    """The decoded content of a small JSON file (``parse``: another decoder, e.g. YAML, whose own
    syntax errors the caller reports). Every other way the file can be unusable is ``error`` with one
    line: missing, not a regular file, too large, not UTF-8, invalid JSON, a key given twice, nested
    too deeply. ``kind`` names the file ("card file"); ``where`` prefixes decoding errors (default
    ``"{kind} {path}"``)."""
    where = where if where is not None else f"{kind} {path}"
    if not path.exists():
        raise error(f"{kind} not found: {path}")
    try:
        return parse(read_small_text(path, kind))
    except json.JSONDecodeError as e:
        raise error(f"{where}: invalid JSON at line {e.lineno}: {e.msg}") from None
    except DuplicateKeyError as e:
        raise error(f"{where}: invalid JSON: {e}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply") from None
    except ValueError as e:  # read_small_text: not a regular file, too large, not UTF-8
        raise error(str(e)) from None
