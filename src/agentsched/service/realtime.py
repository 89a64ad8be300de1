"""Simulated tools in real time, and one VRAM budget shared by every workflow a process serves.

``RealtimeTestbed`` wraps the simulator: each run is simulated as usual (instantly, under a lock:
the simulator's driver holds one run's state), then the calling thread *sleeps* the simulated E2E,
SimPy-rt style: only the clock changes, the figures are the simulator's. Runs of the same or of
different workflows overlap in wall time, so a service can be load-tested without a GPU.

``VramLedger`` is the process-wide budget: while a run sleeps it holds its simulated peak VRAM in
the ledger, and a run starts only when its peak fits beside what the runs in progress hold (it
waits otherwise), so co-scheduling never exceeds the budget. The reservation is per run (its peak
for its whole duration), coarser than per task: conservative, never an OOM. Limits: the
simulated times do not slow each other down across runs (the simulator models contention within
one run), and the GPU queue is per run, not one queue shared by every workflow.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed


class VramLedger:
    """VRAM held by the runs in progress, against one budget (MB); ``hold`` waits until a run fits."""

    def __init__(self, budget_mb: float) -> None:
        self.budget_mb = float(budget_mb)
        self.reserved_mb = 0.0  # held now
        self.peak_reserved_mb = 0.0  # the most ever held at once (never above the budget)
        self._cond = threading.Condition()

    def fits_alone(self, vram_mb: float) -> bool:
        return vram_mb <= self.budget_mb + 1e-9

    @contextmanager
    def hold(self, vram_mb: float) -> Iterator[None]:
        """Reserve ``vram_mb`` for the body (waits while it does not fit beside the others)."""
        if vram_mb <= 0:
            yield
            return
        with self._cond:
            while self.reserved_mb + vram_mb > self.budget_mb + 1e-9:
                self._cond.wait()
            self.reserved_mb += vram_mb
            self.peak_reserved_mb = max(self.peak_reserved_mb, self.reserved_mb)
        try:
            yield
        finally:
            with self._cond:
                self.reserved_mb -= vram_mb
                self._cond.notify_all()


class RealtimeTestbed(Testbed):
    """The simulator, in real time, on a shared VRAM ledger. See the module docstring."""

    concurrent_runs = True  # Runtime: runs may overlap (the simulation itself is locked here)
    deterministic = False

    def __init__(self, inner: Testbed, ledger: VramLedger, *, speed: float = 1.0) -> None:
        self.inner = inner
        self.ledger = ledger
        self.speed = float(speed)  # simulated ms per wall ms (1: real time)
        self.name = inner.name
        self._lock = threading.Lock()

    def run(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None,
            inputs: Any = None) -> Execution:
        with self._lock:
            x = self.inner.run(workflow, mapping, rng=rng, inputs=inputs)
        need_mb = x.peak_vram_mb if x.ok else 0.0
        if not self.ledger.fits_alone(need_mb):  # a run larger than the shared GPU can never start
            return Execution(status=Status.OOM, mapping=dict(mapping), e2e_ms=None, elapsed_ms=0.0,
                             peak_vram_mb=need_mb, spans=(), testbed=self.name,
                             message=f"needs {need_mb:,.0f} MB of VRAM, over the shared budget of "
                                     f"{self.ledger.budget_mb:,.0f} MB")
        wall_ms = x.e2e_ms if x.e2e_ms is not None else x.elapsed_ms
        with self.ledger.hold(need_mb):
            time.sleep(max(0.0, wall_ms) / 1000.0 / self.speed)
        return x

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution | None:
        return self.inner.expected(workflow, mapping)

    def begin_round(self, index: int) -> None:
        with self._lock:
            self.inner.begin_round(index)

    def preflight(self, workflow: Workflow) -> None:
        self.inner.preflight(workflow)

    def close(self) -> None:
        self.inner.close()
