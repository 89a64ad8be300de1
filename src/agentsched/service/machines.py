"""The machine a service's invocations share: the real-time simulator's one simulated machine, or
this process as one machine (local live placement), with the contention its decider learns.

Built once per engine (``build_machines``); the tool pool of the local testbed is the engine's,
passed in, never the process's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agentsched.model.workflow import Workflow
from agentsched.service.config import Placement, ServiceConfig
from agentsched.service.contention_memory import ContentionMemory
from agentsched.service.deciders import make_decider
from agentsched.service.realtime import SharedMachine
from agentsched.store.records import digest
from agentsched.store.store import Store
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.local import machine_id
from agentsched.testbeds.tool_pool import ToolPool


@dataclass
class Machines:
    """What ``build_machines`` built (each None when the configuration needs none)."""

    shared: SharedMachine | None = None  # the real-time simulator's one machine
    live: LiveMachine | None = None  # live placement on the local testbed: this process as a machine
    contention: ContentionMemory | None = None  # live placement's learned contention, kept in the store

    @property
    def gauged(self) -> Any:
        """The machine whose VRAM /metrics reports (None: none)."""
        return self.shared if self.shared is not None else self.live

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
        if self.live is not None:
            self.live.close()
        if self.contention is not None:
            self.contention.save()  # never raises


def build_machines(
    config: ServiceConfig, workflows: list[Workflow], budget: float | None, store: Store, pool: ToolPool | None
) -> Machines:
    """The machines of ``config`` (see the module docstring)."""
    live = config.placement is Placement.LIVE
    if config.realtime:
        out = Machines()
        decider = None
        if live:  # starts from what it learned before a restart
            # why the world in the key: on the simulator it is the machine (another law, other contention)
            world = config.testbed.world
            out.contention = ContentionMemory(store, workflows, digest(world.model_dump(mode="json")) if world else "")
            decider = make_decider(config.decider, learned=out.contention.load(), ratios=out.contention.restored_ratios)
        out.shared = SharedMachine(
            workflows, config.testbed, vram_budget_mb=budget, time_scale=config.time_scale, decider=decider
        )
        if out.contention is not None:
            out.contention.attach(decider, out.shared)
        return out
    if live:
        assert pool is not None  # ServiceConfig: live placement off the simulator is the local testbed's
        return _local_machine(config, workflows, budget, store, pool)
    return Machines()


def _local_machine(
    config: ServiceConfig, workflows: list[Workflow], budget: float | None, store: Store, pool: ToolPool
) -> Machines:
    """Live placement on the local testbed: the process's tasks, its VRAM budget and CPU slots
    (``cpu_slots`` of the testbed, else one per core: the pool's slots then hold every run's CPU
    tasks, so what the decider counts is what waits)."""
    slots = config.testbed.cpu_slots or os.cpu_count() or 1
    pool.set_cpu_slots(slots)
    # keyed by the cards (as profiled) and the machine: moved to another GPU, its units start afresh
    contention = ContentionMemory(store, workflows, machine_id())
    decider = make_decider(config.decider, learned=contention.load(), ratios=contention.restored_ratios)
    live = LiveMachine(decider, workflows, vram_budget_mb=budget, cpu_slots=slots, seed=config.seed)
    contention.attach(decider, live)
    return Machines(live=live, contention=contention)
