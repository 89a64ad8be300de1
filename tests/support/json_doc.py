"""docs/json.md read back: the fields a section's tables document, checked against a document a command
wrote (both ways: every documented field is written, every written field is documented).

A table's first cell names fields by path (docs/json.md): ``a.b`` is field ``b`` of object ``a``,
``a[].b`` field ``b`` of each element of list ``a``. An object or list none of whose children is
documented is one field (a mapping, a map keyed by workflow or policy, a list of strings).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

JSON_MD = Path(__file__).resolve().parents[2] / "docs" / "json.md"

_HEADING = re.compile(r"^#{2,3} ")
_CODE = re.compile(r"`([^`]+)`")


def _sections() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in JSON_MD.read_text(encoding="utf-8").splitlines():
        if _HEADING.match(line):
            lines = out.setdefault(line.lstrip("#").strip(), [])
        else:
            lines.append(line)
    return out


def section(prefix: str) -> list[str]:
    """The lines of the one section whose heading starts with ``prefix`` (e.g. "`agentsched load ")."""
    hits = [h for h in _sections() if h.startswith(prefix)]
    assert len(hits) == 1, f"docs/json.md: {len(hits)} sections start with {prefix!r}: {hits}"
    return _sections()[hits[0]]


def documented(prefix: str) -> set[str]:
    """The field paths of the section's tables (the first cell of each row but the header)."""
    paths: set[str] = set()
    for line in section(prefix):
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        paths.update(_CODE.findall(first))
    assert paths, f"docs/json.md: section {prefix!r} documents no field"
    return paths


def examples(prefix: str) -> list[Any]:
    """The section's ```json examples, parsed (a block of JSON Lines gives one document a line)."""
    docs: list[Any] = []
    block: list[str] | None = None
    for line in section(prefix):
        if line.strip() == "```json":
            block = []
        elif line.strip() == "```" and block is not None:
            text = "\n".join(block)
            try:
                docs.append(json.loads(text))
            except ValueError:
                docs.extend(json.loads(x) for x in block if x.strip())
            block = None
        elif block is not None:
            block.append(line)
    return docs


def fields(doc: Any, paths: set[str]) -> tuple[set[str], set[str]]:
    """The field paths ``doc`` has (descending only where ``paths`` documents children), and the paths
    of its empty lists (whose elements' fields cannot be seen)."""
    seen: set[str] = set()
    empty: set[str] = set()

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            if path and not any(p.startswith(path + ".") for p in paths):
                return  # one field: its keys are data
            for k, v in value.items():
                child = f"{path}.{k}" if path else k
                seen.add(child)
                walk(v, child)
        elif isinstance(value, list):
            child = path + "[]"
            if not any(p.startswith(child) for p in paths):
                return  # a list of plain values
            if not value:
                empty.add(child)
            for v in value:
                walk(v, child)

    walk(doc, "")
    return seen, empty


def check(prefix: str, doc: Any) -> None:
    """``doc`` has exactly the fields the section documents (a field under an empty list excused)."""
    paths = documented(prefix)
    seen, empty = fields(doc, paths)
    undocumented = sorted(seen - paths)
    missing = sorted(p for p in paths - seen if not any(p.startswith(e) for e in empty))
    assert not undocumented and not missing, (
        f"docs/json.md section {prefix!r} and the document disagree: written but not documented {undocumented}; "
        f"documented but not written {missing}"
    )


def check_example(prefix: str) -> int:
    """Every field of the section's (trimmed) examples is documented; how many examples there are."""
    paths = documented(prefix)
    docs = examples(prefix)
    for doc in docs:
        seen, _ = fields(doc, paths)
        assert seen <= paths, f"docs/json.md section {prefix!r}: its example has undocumented {sorted(seen - paths)}"
    return len(docs)
