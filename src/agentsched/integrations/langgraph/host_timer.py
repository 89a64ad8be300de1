"""Host nodes' timing for the LangGraph testbed (``testbed.py``): every node run, through LangGraph's
callbacks (LangChain's ``BaseCallbackHandler``); the host nodes' spans are read from it."""

from __future__ import annotations

import threading
import time
from typing import Any


class HostTimer:
    """LangGraph callback handler timing every node run (host nodes are read from it)."""

    def __init__(self) -> None:
        from langchain_core.callbacks import BaseCallbackHandler

        timer = self

        class Handler(BaseCallbackHandler):
            def on_chain_start(self, serialized, inputs, *, run_id, tags=None, metadata=None, **kw):  # noqa: ANN001, ANN201
                node = (metadata or {}).get("langgraph_node")
                if (
                    node is not None
                    and kw.get("name") == node
                    and any(str(t).startswith("graph:step:") for t in (tags or ()))
                ):
                    with timer.lock:
                        timer.open[run_id] = (node, time.perf_counter())

            def on_chain_end(self, outputs, *, run_id, **kw):  # noqa: ANN001, ANN201
                timer.close(run_id, None)

            def on_chain_error(self, error, *, run_id, **kw):  # noqa: ANN001, ANN201
                timer.close(run_id, error)

        self.handler = Handler()
        self.lock = threading.Lock()
        self.open: dict[Any, tuple[str, float]] = {}
        self.done: list[tuple[str, float, float]] = []  # (node, start s, end s)
        self.failed: list[tuple[str, BaseException]] = []  # (node, error) in order
        self.failed_from: dict[str, tuple[float, float]] = {}  # node -> (start s, end s) of its first failed run

    def close(self, run_id: Any, error: BaseException | None) -> None:
        end = time.perf_counter()
        with self.lock:
            item = self.open.pop(run_id, None)
            if item is None:
                return
            self.done.append((item[0], item[1], end))
            if error is not None:
                self.failed.append((item[0], error))
                self.failed_from.setdefault(item[0], (item[1], end))
