"""A stand-in machine snapshot for deciders under load: the figures a test sets, nothing simulated."""

from __future__ import annotations

import itertools

from agentsched.model.live import MachineSnapshot, RunningView
from agentsched.model.workflow import Mode

_VERSIONS = itertools.count(1)  # each stand-in is a new state (deciders cache per state version)


def fake_live(
    *,
    gpu=(),
    cpu=(),
    budget=None,
    vram=0.0,
    slots=4,
    waiting=0,
    waiting_ms=0.0,
    queue=0,
    door=0,
    now_ms=0.0,
    queued_cards=(),
):
    return MachineSnapshot(
        now_ms=now_ms,
        version=next(_VERSIONS),
        vram_budget_mb=budget,
        vram_in_use_mb=vram,
        cpu_slots=slots,
        cpu_busy=len(cpu),
        cpu_waiting=waiting,
        queue_length=queue,
        admission_waiting=door,
        in_flight=1,
        cpu_waiting_ms=waiting_ms,
        queue_backlog_ms=0.0,
        gpu_running=tuple(gpu),
        cpu_running=tuple(cpu),
        queue_cards=tuple(queued_cards),
    )


def view(card, mode=Mode.GPU_NOW, remaining=100.0):
    return RunningView(card, mode, 0.0, False, card.vram_needed_mb if mode is not Mode.CPU else 0.0, remaining)
