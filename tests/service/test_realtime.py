"""The shared VRAM ledger and the real-time simulator (in process)."""

from __future__ import annotations

import threading

from agentsched.model.execution import Status
from agentsched.model.workflow import Mode
from agentsched.scenarios import resolve_workflow
from agentsched.service.realtime import RealtimeTestbed, VramLedger
from agentsched.testbeds.spec import TestbedSpec


def test_the_ledger_never_holds_more_than_its_budget():
    ledger = VramLedger(1000.0)
    inside = threading.Barrier(2, timeout=30)  # two 400 MB holds fit together; a third must wait
    seen: list[float] = []

    def hold(mb: float) -> None:
        with ledger.hold(mb):
            seen.append(ledger.reserved_mb)
            try:
                inside.wait()
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=hold, args=(400.0,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 6 and max(seen) <= 1000.0 and ledger.peak_reserved_mb == 800.0
    assert ledger.reserved_mb == 0.0


def test_a_run_larger_than_the_shared_budget_is_an_oom_not_a_wait():
    wf = resolve_workflow("S1")
    tb = RealtimeTestbed(TestbedSpec(kind="sim", noise_sigma=0.0).build(), VramLedger(100.0), speed=1e9)
    try:
        x = tb.run(wf, {"A": Mode.GPU_NOW, "B": Mode.GPU_NOW, "C": Mode.GPU_NOW, "D": Mode.CPU})
        assert x.status is Status.OOM and "shared budget of 100 MB" in x.message
        ok = tb.run(wf, dict.fromkeys("ABCD", Mode.CPU))
        assert ok.ok and ok.peak_vram_mb == 0  # CPU-only runs need no VRAM: they never wait
    finally:
        tb.close()
