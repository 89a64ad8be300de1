"""One experiment per output folder at a time: an exclusive ``flock`` on ``OUT/bench.lock``, held
by the process that runs the experiment until it ends (``hold_folder``).

Two benches on one ``--out`` would replace each other's journal and outputs mid-run; the second is
refused instead. The kernel drops the lock when the holder's process ends (even by ``kill -9``), so a
lock file left behind is never stale. The file is kept, never removed: removing it could let two
processes lock two different files of the same name.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agentsched.errors import AgentschedError

LOCK_NAME = "bench.lock"
_HELD: dict[str, FolderLock] = {}  # by real path: what this process holds (until it ends)


def hold_folder(folder: str | Path, flag: str = "--out") -> None:
    """Lock ``folder`` for this process until it ends (a one-line error when another process holds
    it). Held to the end because a command writes its outputs last; taking it again in the same
    process (a second command run in-process, as tests do) is allowed."""
    key = os.path.realpath(folder)
    if key not in _HELD:
        _HELD[key] = FolderLock(folder, flag)


class FolderLock:
    """The held lock of one output folder; ``release()`` (or process exit) lets another run in."""

    def __init__(self, folder: str | Path, flag: str = "--out") -> None:
        self.path = Path(folder) / LOCK_NAME
        try:
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise AgentschedError(f"{flag} {folder}: cannot create {LOCK_NAME} ({e.strerror})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            self.release()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise AgentschedError(f"{flag} {folder} is in use by another running bench or load study{who}; "
                                  "wait for it to end or choose another folder") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for the refusal above

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
