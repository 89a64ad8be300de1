"""Discrete-event simulated testbed: the driver's ``sim`` backend, one invocation on the kernel.

Time advances in the machine's one discrete-event kernel (``kernel.Kernel``: event to event, the
world's contention law for GPU tasks, the world's noise drawn at each start, load first, then
work; ``noise_sigma=0`` gives expected values). Admission follows the shared start rules
(``rules.Dispatcher``, through ``driver.Driver``). Invariants (checked by tests on random DAGs):
dependencies respected, one queued task at a time, VRAM in use never above the budget in an ``ok``
execution, E2E = end of the last sink.

The world may change between rounds (``world.DriftWorld``): ``begin_round(index)``, called by the
run loop at the start of every round, puts ``world.at_round(index)`` in effect for the runs that
follow (until the next call; before any, round 0's).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard
from agentsched.model.rules import Start
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure
from agentsched.testbeds.kernel import Kernel
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, MAX_NOISE_SIGMA
from agentsched.testbeds.world import World, load_world


class SimBackend(Backend):
    """Simulated host: many CPU cores, one GPU with a VRAM budget and contention."""

    name = "sim"
    computes_outputs = False  # simulated tasks compute nothing

    def __init__(
        self,
        *,
        noise_sigma: float = DEFAULT_NOISE_SIGMA,
        seed: int | None = 0,
        cpu_slots: int | None = None,
        world: str | Path | World | None = None,
    ) -> None:
        if not (math.isfinite(noise_sigma) and 0 <= noise_sigma <= MAX_NOISE_SIGMA):
            raise TestbedError(f"noise_sigma must be in [0, {MAX_NOISE_SIGMA:g}], got {noise_sigma}")
        if cpu_slots is not None and cpu_slots < 1:
            raise TestbedError(f"cpu_slots must be >= 1, got {cpu_slots}")
        self.noise_sigma = noise_sigma  # sigma of per-task multiplicative noise (its shape: the world's)
        self._cpu_slots = cpu_slots  # cap on concurrent CPU tasks (None: unbounded many-core host)
        self.rng = random.Random(seed)  # default generator when a run gets none
        self.deterministic = noise_sigma == 0
        self.world = load_world(world)  # the simulated machine (default a5500), possibly drifting
        self.round_index = 0  # the round whose world is in effect (see begin_round)
        self.current_world = self.world.at_round(0)
        self.kernel = Kernel(self.current_world, noise_sigma=noise_sigma, rng=None)
        self._order: Mapping[str, int] = {}  # the run's workflow order (a batch of ends is applied in it)

    def begin_round(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise TestbedError(f"round index must be an integer >= 0, got {index!r}")
        self.round_index = index
        world = self.world.at_round(index)
        if world is not self.current_world:
            self.current_world = world
            self.kernel.set_world(world)

    @property
    def cpu_slots(self) -> int | None:
        return self._cpu_slots

    def can_expect(self) -> bool:
        return True

    def begin(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None, expected: bool = False
    ) -> Failure | None:
        self._cards = workflow.task_cards
        self._order = workflow.task_index
        kernel = self.kernel
        kernel.reset()
        kernel.label = workflow.name
        kernel.set_noise(None if expected else (rng if rng is not None else self.rng), self.noise_sigma)
        return None

    def now_ms(self) -> float:
        return self.kernel.now_ms

    def real_cards(self, workflow: Workflow) -> Mapping[str, ToolCard]:
        # the one place the simulator uses a task's real VRAM: the world's, which the cards may understate
        return self.current_world.real_cards(workflow.task_cards)

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        self.kernel.start(start.task, self._cards[start.task], start.mode, vram_mb=start.vram_mb, load_ms=start.load_ms)

    def wait(self) -> list[Completion]:
        kernel = self.kernel
        while True:  # a step may only end a load: advance until a task ends
            finished = kernel.step()
            if finished:
                finished.sort(key=lambda r: self._order[r.key])
                return [Completion(r.key, r.start_ms, kernel.now_ms, r.load_ms) for r in finished]

    def abort(self, wait: bool = True) -> dict[str, float]:
        loads = {r.key: r.load_ms for r in self.kernel.runs}
        for r in list(self.kernel.runs):
            self.kernel.stop(r)
        return loads


class SimTestbed(Driver):
    """The simulated testbed: the driver over a ``SimBackend`` (``world``: a ``World``, a built-in
    name, a file, or ``perturbed:SEED``; default the calibrated ``a5500``)."""

    def __init__(
        self,
        *,
        noise_sigma: float = DEFAULT_NOISE_SIGMA,
        seed: int | None = 0,
        cpu_slots: int | None = None,
        world: str | Path | World | None = None,
    ) -> None:
        super().__init__(SimBackend(noise_sigma=noise_sigma, seed=seed, cpu_slots=cpu_slots, world=world))

    @property
    def world(self) -> World:
        """The simulated world as given (a ``DriftWorld`` for a drifting one)."""
        return self.backend.world  # type: ignore[attr-defined]

    @property
    def current_world(self) -> World:
        """The world in effect now (``world.at_round`` of the last ``begin_round``)."""
        return self.backend.current_world  # type: ignore[attr-defined]

    @property
    def noise_sigma(self) -> float:
        return self.backend.noise_sigma  # type: ignore[attr-defined]

    @property
    def cpu_slots(self) -> int | None:
        return self.backend.cpu_slots

    @property
    def rng(self) -> random.Random:
        return self.backend.rng  # type: ignore[attr-defined]
