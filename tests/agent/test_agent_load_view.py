"""The sixth evidence stream: the load at decision time in the agent's view and prompt.

Absent without a load (the prompt is the golden one, byte for byte) and when the machine is idle;
present under a stream's load, with what the live state says (GPU tasks and their expected
remaining time, VRAM in use, queue, CPU slots busy), framed as state, never as advice.
"""

from __future__ import annotations

import random
import re

from agentsched.agent.policy import AgentPolicy
from agentsched.agent.prompt import MAX_LOAD_ROWS, build_prompt, load_template
from agentsched.agent.view import LoadEvidence
from agentsched.model.live import FasterDevice
from agentsched.model.workflow import Mode
from agentsched.policies.base import PolicyContext
from agentsched.scenarios import load_scenario
from agentsched.testbeds.arrivals import Arrival
from agentsched.testbeds.stream import run_stream
from tests.support.views import complete_mappings, round0_view

HEADER = "Load at decision time"


class _Snapshots(FasterDevice):
    """Places task A on the CPU, every other on its faster device; keeps the load of every placement."""

    late_binding = True

    def __init__(self) -> None:
        self.seen: list[LoadEvidence] = []

    def place(self, inv, task, live):
        self.seen.append(LoadEvidence.from_live(live))
        return Mode.CPU if task == "A" else super().place(inv, task, live)


def _loaded_evidence() -> LoadEvidence:
    """The load seen by a placement while other invocations run on the GPU (a real stream)."""
    wfs = [load_scenario("S9"), load_scenario("S10")]
    decider = _Snapshots()
    arrivals = [Arrival(10.0 * i, i % 2) for i in range(6)]
    run_stream(wfs, arrivals, decider, vram_budget_mb=8192.0, cpu_slots=2, noise_sigma=0.0, seed=0)
    busy = [e for e in decider.seen if len(e.gpu_tasks) >= 2 and e.cpu_busy]
    assert busy, "the stream never had two GPU tasks and a busy CPU at a placement"
    return busy[-1]


def _policy_view(live=None, evidence: LoadEvidence | None = None):
    wf = load_scenario("S5")
    policy = AgentPolicy("rules")
    policy.reset(
        PolicyContext(
            workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=lambda m: None, rounds=20, repeats=1
        )
    )
    policy.watch_load(live)
    view = policy.view(0)
    if evidence is not None:
        from dataclasses import replace

        view = replace(view, load=evidence)
    return view


def test_live_snapshot_matches_the_stream_state():
    ev = _loaded_evidence()
    assert ev.vram_in_use_mb == sum(g.vram_mb for g in ev.gpu_tasks) > 0
    assert ev.vram_budget_mb == 8192.0 and ev.cpu_slots == 2 and 0 < ev.cpu_busy <= 2
    assert all(g.mode == "gpu_now" and g.expected_remaining_ms >= 0 for g in ev.gpu_tasks)
    remaining = [g.expected_remaining_ms for g in ev.gpu_tasks]
    assert remaining == sorted(remaining, reverse=True)
    assert ev.in_flight >= 1 and not ev.idle


def test_block_present_under_load_with_the_live_figures():
    ev = _loaded_evidence()
    user = build_prompt(_policy_view(evidence=ev)).user
    i4, i5, i6, i7 = (
        user.index(h) for h in ("## 4. Runtime monitor", f"## 5. {HEADER}", "## 6. Guidance", "## 7. Answer")
    )
    assert i4 < i5 < i6 < i7
    block = user[i5:i6]
    assert load_template("load") in block and "not advice and not an instruction" in block
    assert (
        f"- GPU: {len(ev.gpu_tasks)} tasks running; VRAM in use {ev.vram_in_use_mb:.0f} MB of a 8192 MB budget" in block
    )
    assert f"- CPU: {ev.cpu_busy} of 2 slots busy" in block and "- GPU queue: 0 tasks waiting." in block
    for g in ev.gpu_tasks[:MAX_LOAD_ROWS]:
        assert re.search(rf"\| {re.escape(g.tool)} \| gpu_now \| [\d.]+ \| [\d.]+ \| {g.vram_mb:.0f} \|", block)
    rest = ev.gpu_tasks[MAX_LOAD_ROWS:]
    assert (f"... and {len(rest)} more tasks" in block) == (len(rest) > 1)
    # evidence only: no complete mapping and no mode recommended for this workflow's tasks
    assert complete_mappings(block, load_scenario("S5").task_ids) == []
    assert not re.search(r"\b(should|recommend|choose|move)\b", block, re.IGNORECASE)


def test_block_absent_without_load_or_when_idle():
    golden = build_prompt(round0_view(load_scenario("S5"), "warm"))
    none = _policy_view()
    assert none.load is None and build_prompt(none).user == golden.user
    idle = LoadEvidence((), 0.0, 8192.0, 0, 0.0, 0, 16, 0, 0, 0)
    assert idle.idle and build_prompt(_policy_view(evidence=idle)).user == golden.user


def test_watch_load_reads_the_live_state_at_view_time():
    wfs = [load_scenario("S5")]
    views = []

    class Asks(FasterDevice):
        late_binding = True

        def __init__(self, policy):
            self.policy = policy

        def place(self, inv, task, live):
            self.policy.watch_load(live)
            views.append(self.policy.view(0).load)
            return super().place(inv, task, live)

    wf = wfs[0]
    policy = AgentPolicy("rules")
    policy.reset(
        PolicyContext(
            workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=lambda m: None, rounds=20, repeats=1
        )
    )
    run_stream(wfs, [Arrival(0.0, 0), Arrival(5.0, 0)], Asks(policy), vram_budget_mb=8192.0, noise_sigma=0.0)
    assert views[0].idle  # the first task of the first invocation: nothing runs yet
    assert any(len(v.gpu_tasks) >= 1 for v in views[1:])
    policy.watch_load(None)
    assert policy.view(0).load is None
