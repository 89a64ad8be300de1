"""A pool of daemon threads for the local testbed's tasks (``local.py``)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any


class DaemonPool:
    """At most ``workers`` tasks at once, each on a daemon thread of its own: a task that never
    returns (a hung tool, abandoned after its timeout or a Ctrl-C) cannot keep the process alive
    at exit, as a ThreadPoolExecutor's joined workers would."""

    def __init__(self, workers: int, name: str) -> None:
        self.slots = threading.BoundedSemaphore(workers)
        self.name = name
        self.count = 0

    def submit(self, fn: Any, *args: Any) -> Future:
        fut: Future = Future()
        self.count += 1

        def job() -> None:
            with self.slots:
                if not fut.set_running_or_notify_cancel():
                    return
                try:
                    fut.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - the task's failure, reported by wait()
                    fut.set_exception(exc)

        threading.Thread(target=job, name=f"{self.name}-{self.count}", daemon=True).start()
        return fut

    def shutdown(self) -> None:
        """Nothing to join: the run waited for its tasks (``stop_all``); abandoned ones stay behind."""
