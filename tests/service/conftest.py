"""A real ``agentsched serve`` process on 127.0.0.1 (a free port chosen by the server), and httpx clients."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_WORKFLOWS = ROOT / "examples" / "serve" / "workflows"
START_TIMEOUT_S = 120  # bounds the wait for the port line (a loaded CI machine); not a timing check


class ServerProcess:
    """``python -m agentsched serve ARGS --port 0``; ``url`` once it listens."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentsched", "serve", *args, "--port", "0"],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self._ready.wait(START_TIMEOUT_S)
        if self.url is None:
            self.proc.kill()
            raise AssertionError("server did not start:\n" + "".join(self.lines))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if self.url is None and "listening on " in line:
                self.url = line.split("listening on ", 1)[1].split()[0]
                self._ready.set()
        self._ready.set()  # the process ended

    def client(self, **kw: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 120) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def start_server():
    started: list[ServerProcess] = []

    def start(args: list[str], cwd: Path = ROOT) -> ServerProcess:
        s = ServerProcess(args, cwd)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()
