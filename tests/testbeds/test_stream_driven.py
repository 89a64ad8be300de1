"""A stream driven from outside (arrivals one at a time, the clock moved by the caller) is the same
stream as ``run()`` over the same arrivals: what the real-time service relies on."""

from __future__ import annotations

import random

from agentsched.model.live import StaticDecider
from agentsched.model.workflow import Mode
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.arrivals import poisson_arrivals
from agentsched.testbeds.stream import StreamSim


def test_arrivals_fed_one_at_a_time_give_run_s_result():
    wfs = [resolve_workflow(n) for n in ("S1", "S7", "S11")]
    mappings = {wf.name: {t: Mode.GPU_NOW if c.has_gpu else Mode.CPU for t, c in wf.task_cards.items()} for wf in wfs}
    arrivals = poisson_arrivals(6.0, 20.0, len(wfs), random.Random(4))
    kw = {"vram_budget_mb": 4096.0, "cpu_slots": 4, "noise_sigma": 0.03, "seed": 9}
    whole = StreamSim(wfs, arrivals, StaticDecider(mappings), **kw).run()

    driven = StreamSim(wfs, (), StaticDecider(mappings), **kw)
    driven.begin()
    invs = []
    for a in arrivals:
        driven.advance_to(a.time_ms)
        assert driven.now_ms == a.time_ms
        invs.append(driven.arrive(a.workflow))
    while driven.runs:
        driven.advance_to(driven.next_event_ms())
    assert driven.next_event_ms() == float("inf")
    assert [(i.status, i.end_ms) for i in invs] == [(i.status, i.end_ms) for i in whole.invocations]
    assert {i.status for i in invs} >= {"ok", "oom"}  # a stream with contention and VRAM failures


def test_an_invocation_may_bring_its_own_mapping():
    wf = resolve_workflow("S1")

    class Brought(StaticDecider):
        def plan(self, inv, live):
            return inv.mapping

    sim = StreamSim([wf], (), Brought({}), vram_budget_mb=None)
    sim.begin()
    inv = sim.arrive(0, dict.fromkeys(wf.task_ids, Mode.CPU))
    sim.advance_to(1e9)
    assert inv.status == "ok" and set(inv.mapping.values()) == {Mode.CPU}
    assert inv.end_ms - inv.arrival_ms == sum(wf.task_cards[t].cpu_ms for t in ("A", "B", "D"))  # A; B (C beside it); D
