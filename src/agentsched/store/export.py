"""One learner written out as one JSON document (``agentsched store export``; format
``EXPORT_FORMAT``, docs/runtime.md): the learner's key and settings, the workflow and cards it
learned, its rounds and every execution's full record. A store holds no secret (the settings are
round size, exploration share, seed and testbed; no API key or URL is ever stored), so an export
holds none either.

The export is streamed: one execution at a time, and a column larger than ``WHOLE_BYTES`` copied
from SQLite in ``CHUNK_BYTES`` pieces, so memory stays bounded whatever a row holds (a row of
hundreds of MB is never read, decoded and encoded whole). A record that large is copied as stored, checked to be a JSON
object by its first and last character rather than decoded. The file is written whole or not at all:
a temporary file created exclusively under an unpredictable name beside ``out`` (never one planted
there, nor a link's target), renamed over ``out``.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agentsched.errors import StoreError
from agentsched.store import decode
from agentsched.store.admin import best_round
from agentsched.store.rows import LearnerRow
from agentsched.store.schema import SCHEMA_VERSION
from agentsched.store.store import Store

EXPORT_FORMAT = "agentsched-learner-export"
EXPORT_VERSION = 1
WHOLE_BYTES = 8 << 20  # a column up to this size is read whole (a record decoded and checked)
CHUNK_BYTES = 1 << 20  # a larger one is copied in pieces of this size
_HEAD = json.dumps({"format": EXPORT_FORMAT}, indent=1)[:-2]  # how every export begins (looks_like_export)


def write_export(st: Store, ln: LearnerRow, out: str | Path) -> tuple[int, int]:
    """Write learner ``ln`` of ``st`` to ``out`` (whole or not at all); returns (executions, rounds) written."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as a plain created file would be (mkstemp makes it owner-only)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            counts = _write(st, ln, f)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return counts


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(st: Store, ln: LearnerRow, f: IO[str]) -> tuple[int, int]:
    rounds = [
        {
            "round": r.round,
            "mapping": r.mapping,
            "status": r.status,
            "e2e_ms": r.e2e_ms,
            "executions_after": r.executions_after,
            "reason": r.reason,
            "created_s": r.created_s,
        }
        for r in st.rounds(ln.id)
    ]
    head = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "learner": {
            "id": ln.id,
            "key": ln.key,
            "workflow_name": ln.workflow_name,
            "workflow_hash": ln.workflow_hash,
            "card_hash": ln.card_hash,
            "policy": ln.policy,
            "settings": ln.settings,
            "created_s": ln.created_s,
        },
        "workflow": st.workflow_doc(ln.workflow_hash),
        "cards": st.card_doc(ln.card_hash),
        "best": best_round(st, ln.id),
        "rounds": rounds,
        "executions": [],
    }
    text = _dumps(head)
    f.write(text[: text.rindex("[]")] + "[")  # the executions follow, one at a time
    n = 0
    for n, row in enumerate(_executions(st, ln.id), start=1):
        f.write(",\n  " if n > 1 else "\n  ")
        _write_execution(st, row, f)
    f.write("\n ]\n}\n" if n else "]\n}\n")
    return n, len(rounds)


def _dumps(value: Any, indent: str = "") -> str:
    return json.dumps(value, indent=1, allow_nan=False).replace("\n", "\n" + indent)


def _executions(st: Store, learner_id: int) -> Iterator[tuple]:
    """The learner's executions one at a time, without their two large columns (copied apart: ``_column``)."""
    ids = [r[0] for r in st._read("SELECT id FROM executions WHERE learner_id = ? ORDER BY id", (learner_id,))]
    for i in ids:
        yield from st._read("SELECT id, seq, kind, round, status, e2e_ms, created_s FROM executions WHERE id = ?", (i,))


def _write_execution(st: Store, row: tuple, f: IO[str]) -> None:
    what = f"execution {row[0]}"
    small = {
        "invocation_id": row[0],
        "seq": row[1],
        "kind": row[2],
        "round": row[3],
        "status": row[4],
        "e2e_ms": _decoded(st, decode.e2e, row[5], what),
        "created_s": row[6],
    }
    f.write(_dumps(small, "  ")[:-4] + ',\n   "message": ')
    _column(st, row[0], "message", what, f)
    f.write(',\n   "record": ')
    _column(st, row[0], "record", what, f)
    f.write("\n  }")


def _column(st: Store, rowid: int, column: str, what: str, f: IO[str]) -> None:
    """Execution ``rowid``'s ``column`` as JSON: the message a string, the record an object."""
    size = st._column_bytes("executions", column, rowid)
    if size <= WHOLE_BYTES:
        value = st._read(f"SELECT {column} FROM executions WHERE id = ?", (rowid,))[0][0]
        if column == "record":
            value = _decoded(st, decode.loads_object, value, what)
        elif not isinstance(value, str):
            raise StoreError(f"store {st.path} is damaged: {what}'s message is not text")
        f.write(_dumps(value, "   "))
        return
    chunks = _text_chunks(st, rowid, column, what)
    if column == "message":
        f.write('"')
        for text in chunks:
            f.write(json.dumps(text)[1:-1])
        f.write('"')
        return
    first = last = ""
    for text in chunks:
        first = first or text.lstrip()[:1]
        last = text.rstrip()[-1:] or last
        f.write(text)
    if (first, last) != ("{", "}"):
        raise StoreError(f"store {st.path} is damaged: {what} is not a JSON object")


def _text_chunks(st: Store, rowid: int, column: str, what: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in st._column_chunks("executions", column, rowid, CHUNK_BYTES):
            yield decoder.decode(chunk)
        yield decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise StoreError(f"store {st.path} is damaged: {what}'s {column} is not UTF-8 text") from None


def _decoded(st: Store, how: Any, value: Any, what: str) -> Any:
    try:
        return how(value, what)
    except decode.RowError as e:
        raise StoreError(f"store {st.path} is damaged: {e}") from None


def looks_like_export(path: Path) -> bool:
    """Does ``path`` begin as ``write_export`` begins an export (its format first), whatever its
    version? Only its first bytes are read (an export may be large); an unreadable file is a
    one-line ``StoreError``."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as e:
        raise StoreError(f"{path} cannot be read: {e.strerror}") from None
    return _HEAD.encode() in head


def read_export(path: str | Path) -> dict[str, Any]:
    """An export read back (checked to be one); a one-line ``StoreError`` otherwise."""
    path = Path(path)  # a text path too, as docs/runtime.md writes it
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StoreError(f"export {path} cannot be read: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise StoreError(f"{path} is not an agentsched learner export (format {EXPORT_FORMAT!r})")
    if doc.get("version") != EXPORT_VERSION:
        raise StoreError(f"export {path} has version {doc.get('version')!r}; this agentsched reads {EXPORT_VERSION}")
    return doc
