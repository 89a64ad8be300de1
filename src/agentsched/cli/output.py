"""Output files and folders of the CLI commands: checked before the work, written after it.

A command that writes a file (``run --json-out``, ``ablation --json-out``, ``profile --out``) or a folder
(``bench --out``) calls ``check_output_file`` / ``prepare_output_dir`` before it runs anything,
so an unwritable destination costs one line on stderr, not a finished run.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentsched.errors import AgentschedError


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _dangling_link(p: Path) -> str | None:
    """Why ``p`` cannot be followed, when it is a symlink that leads nowhere (a loop or a missing
    target); None otherwise. mkdir/open would say only "File exists"."""
    if not p.is_symlink():
        return None
    try:
        p.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 raises this for a loop
        return "is a symlink loop"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop"
        return f"is a symlink to a missing target ({os.readlink(p)})"
    return None


def check_output_file(path: str | Path, flag: str, *, create_parent: bool = False) -> Path:
    """Fail in one line unless ``path`` can be written: its folder exists (``create_parent``: is
    created now), it is not a folder, and a file can be created (or appended to) there. Leaves no
    file behind; an existing file is untouched."""
    p = Path(path)
    why = _dangling_link(p)
    if why is not None:
        raise AgentschedError(f"{flag}: {p} {why}")
    parent = p.parent
    if create_parent and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AgentschedError(f"{flag}: cannot create folder {parent}: {_reason(e)}") from None
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise AgentschedError(f"{flag}: folder {parent} {what}")
    if p.is_dir():
        raise AgentschedError(f"{flag}: {p} is a folder")
    try:
        if p.exists():
            with open(p, "a"):  # opening for append writes nothing
                pass
        else:
            with open(p, "x"):
                pass
            p.unlink()
    except OSError as e:
        raise AgentschedError(f"{flag}: cannot write {p}: {_reason(e)}") from None
    return p


def prepare_output_dir(path: str | Path, flag: str = "--out", files: Sequence[str] = ()) -> Path:
    """Create output folder ``path`` (and its parents) and check that files can be written in it, and
    that none of ``files`` (the names the command writes there) is taken by a folder or another
    non-file, so that a folder named report.md fails the command before its runs, not after."""
    out = Path(path)
    why = _dangling_link(out)
    if why is not None:
        raise AgentschedError(f"{flag}: {out} {why}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AgentschedError(f"cannot create output folder {out}: {_reason(e)}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".agentsched-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise AgentschedError(f"cannot write in output folder {out}: {_reason(e)}") from None
    for name in files:
        taken = out / name
        if taken.exists() and not taken.is_file():
            raise AgentschedError(
                f"{flag}: {taken} is {'a folder' if taken.is_dir() else 'not a file'}, where "
                f"the output file {name} goes; remove or rename it"
            )
    return out


def write_json(path: str | Path, doc: Any, indent: int = 1) -> None:
    """Write ``doc`` as JSON (one-line error when the write fails after all). Streamed: the whole text
    at once takes several times the document's memory (hundreds of MB for a 10,000-task run)."""
    try:
        with Path(path).open("w") as f:
            json.dump(doc, f, indent=indent)
            f.write("\n")
    except OSError as e:
        raise AgentschedError(f"cannot write {path}: {_reason(e)}") from None


def emit(doc: Any, text: str, *, json_out: bool, json_file: str | None, markdown: bool = False) -> None:
    """The one output convention (docs/json.md): ``--json`` prints ``doc`` as JSON on stdout instead of
    ``text``; ``--json-out FILE`` also writes it to FILE (and says so on stderr when stdout is JSON).
    ``markdown``: ``text`` is Markdown, printed rendered (headings, tables), not as its source."""
    import typer

    from agentsched.cli.common import console, err_console, print_json

    if json_out:
        print_json(doc)
    elif markdown:
        from rich.markdown import Markdown

        console.print(Markdown(text))
    else:
        typer.echo(text)  # plain: markdown tables must not wrap
    if json_file:
        write_json(json_file, doc, indent=2)
        (err_console if json_out else console).print(f"written {json_file}")
