"""One experiment per output folder at a time: an exclusive ``flock`` on ``OUT/bench.lock``, held
by the process that runs the experiment until it ends (``hold_folder``).

Two benches on one ``--out`` would replace each other's journal and outputs mid-run; the second is
refused instead. The kernel drops the lock when the holder's process ends (even by ``kill -9``), so a
lock file left behind is never stale. The holder removes the file when it is done (``release_folder``,
or at exit) while it still holds the lock; a process that locked the file just before it was removed
sees, once it holds the lock, that the name no longer points to its file, and takes the name again
(so two processes never hold two files of one name).
"""

from __future__ import annotations

import atexit
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


def release_folder(folder: str | Path) -> None:
    """Let another process run in ``folder`` now, and remove its lock file (a no-op when not held)."""
    held = _HELD.pop(os.path.realpath(folder), None)
    if held is not None:
        held.release()


@atexit.register
def _release_all() -> None:
    for key in list(_HELD):
        _HELD.pop(key).release()


class FolderLock:
    """The held lock of one output folder; ``release()`` (or process exit) lets another run in."""

    def __init__(self, folder: str | Path, flag: str = "--out") -> None:
        self.path = Path(folder) / LOCK_NAME
        self._fd: int | None = None
        while self._fd is None:
            fd = self._open(folder, flag)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                who = f" (pid {holder})" if holder.isdigit() else ""
                raise AgentschedError(
                    f"{flag} {folder} is in use by another running bench or load study{who}; "
                    "wait for it to end or choose another folder"
                ) from None
            if self._names(fd):
                self._fd = fd
            else:  # its holder removed it as we locked it: lock the file now under that name
                os.close(fd)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for the refusal above

    def _open(self, folder: str | Path, flag: str) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise AgentschedError(f"{flag} {folder}: cannot create {LOCK_NAME} ({e.strerror})") from None

    def _names(self, fd: int) -> bool:
        """Does the lock file's name still point to the file ``fd`` holds?"""
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.path))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file (still held, so no other process holds it meanwhile), then unlock."""
        if self._fd is not None:
            if self._names(self._fd):
                self.path.unlink(missing_ok=True)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
