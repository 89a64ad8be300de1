"""Discrete-event simulated testbed: the driver's ``sim`` backend.

Time advances from event to event (a task starts, a load ends, a task ends). Between events every
rate is constant: CPU tasks and loads run at rate 1; GPU tasks at the rate the contention law of
the simulated *world* gives them (``world.py``, ``laws.py``; the calibrated ``a5500`` with the
linear law ``contention.gpu_rates`` by default), which no scheduler sees. Admission follows the shared start rules (``rules.Dispatcher``, through
``driver.Driver``). Invariants (checked by tests on random DAGs): dependencies respected, one
queued task at a time, VRAM in use never above the budget in an ``ok`` execution, E2E = end of the
last sink.

Noise: each task's isolated work (and load) is multiplied by a factor drawn from an injected
``random.Random`` when the task starts (load first, then work): ``exp(N(0, noise_sigma))`` in the
default world, another shape where the world says so (``noise.py``: Student-t, stragglers);
``noise_sigma=0`` gives expected values.

The world may change between rounds (``world.DriftWorld``): ``begin_round(index)``, called by the
run loop at the start of every round, puts ``world.at_round(index)`` in effect for the runs that
follow (until the next call; before any, round 0's).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure
from agentsched.testbeds.laws import rate_function
from agentsched.testbeds.noise import noise_factor
from agentsched.model.rules import Start
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, MAX_NOISE_SIGMA
from agentsched.testbeds.world import World, load_world

_EPS = 1e-9


@dataclass(slots=True)
class _Task:
    """A started task of the simulated run."""

    remaining: float  # ms of isolated work left in the current phase
    running: bool  # False while a queued task loads its model, True once it runs
    on_gpu: bool  # runs on the GPU (contends) rather than on the host
    sensitivity: float  # the world's contention parameters of its tool (0, 0 on the host)
    pressure: float
    work_ms: float  # its isolated run work, noise drawn at start
    start_ms: float  # when it started (a queued task: before loading)
    load_ms: float  # its load, noise drawn (0: none)
    rate: float = 1.0  # work per ms until the next event (below 1: slowed by GPU co-runners)


class SimBackend(Backend):
    """Simulated host: many CPU cores, one GPU with a VRAM budget and contention."""

    name = "sim"
    computes_outputs = False  # simulated tasks compute nothing

    def __init__(self, *, noise_sigma: float = DEFAULT_NOISE_SIGMA, seed: int | None = 0, cpu_slots: int | None = None,
                 world: str | Path | World | None = None) -> None:
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
        self._in_effect(self.world.at_round(0))
        # per run: the workflow, its cards, the noise generator (None: expected values), the clock,
        # and the started tasks
        self._wf: Workflow | None = None
        self._cards: dict = {}
        self._run_rng: random.Random | None = None
        self._sigma = 0.0
        self._now = 0.0
        self._state: dict[str, _Task] = {}

    def _in_effect(self, world: World) -> None:
        """Put ``world`` in effect for the runs that follow."""
        self.current_world = world
        self._rates = rate_function(world.law)  # the contention law
        self._noise = world.noise
        self._default_noise = world.noise.is_default  # exp(gauss) inline: the default world's stream
        self._params: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}  # world.params by tool

    def begin_round(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise TestbedError(f"round index must be an integer >= 0, got {index!r}")
        self.round_index = index
        world = self.world.at_round(index)
        if world is not self.current_world:
            self._in_effect(world)

    @property
    def cpu_slots(self) -> int | None:
        return self._cpu_slots

    def can_expect(self) -> bool:
        return True

    def begin(self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None,
              expected: bool = False) -> Failure | None:
        self._wf = workflow
        self._cards = workflow.task_cards
        self._run_rng = None if expected else (rng if rng is not None else self.rng)
        self._sigma = self.noise_sigma if self._run_rng is not None else 0.0
        self._now = 0.0
        self._state = {}
        return None

    def now_ms(self) -> float:
        return self._now

    def real_cards(self, workflow: Workflow) -> Mapping[str, ToolCard]:
        # the one place the simulator uses a task's real VRAM: the world's, which the cards may understate
        return self.current_world.real_cards(workflow.task_cards)

    def _noisy(self, x: float) -> float:
        rng = self._run_rng
        if self._sigma <= 0 or rng is None:
            return x
        if self._default_noise:
            return x * math.exp(rng.gauss(0.0, self._sigma))
        return x * noise_factor(rng, self._sigma, self._noise)

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        card = self._cards[start.task]
        on_gpu = start.mode is not Mode.CPU and card.has_gpu
        work = card.gpu_ms if on_gpu else card.cpu_ms
        sens, press = self._contention(card) if on_gpu else (0.0, 0.0)
        load = self._noisy(start.load_ms) if start.load_ms > 0 else 0.0
        # a queued task's run work is drawn now too, so the rng stream is mapping-stable
        work = self._noisy(work)
        if load > 0:
            self._state[start.task] = _Task(load, False, on_gpu, sens, press, work, self._now, load)
        else:
            self._state[start.task] = _Task(work, True, on_gpu, sens, press, work, self._now, load)

    def _contention(self, card: ToolCard) -> tuple[float, float]:
        key = (card.name, card.tags)
        hit = self._params.get(key)
        if hit is None:  # looked up once per tool: this runs for every GPU start
            hit = self._params[key] = self.current_world.params(card)
        return hit

    def wait(self) -> list[Completion]:
        while True:  # a step may only end a load: advance until a task ends
            finished = self._step()
            if finished:
                order = self._wf.task_index.__getitem__  # type: ignore[union-attr]
                out = []
                for t in sorted(finished, key=order):
                    s = self._state.pop(t)
                    out.append(Completion(t, s.start_ms, self._now, s.load_ms))
                return out

    def _step(self) -> list[str]:
        """Advance to the next event; the tasks that ended there."""
        state = self._state
        # rates between now and the next event (1 for the host, loads and a lone GPU task), kept on
        # the tasks: a lookup per task and event was a third of a wide fan-out's time (docs/simulator.md)
        gpu = [s for s in state.values() if s.on_gpu and s.running]
        if len(gpu) > 1:
            for s, r in zip(gpu, self._rates([s.sensitivity for s in gpu], [s.pressure for s in gpu]), strict=True):
                s.rate = r
            dt = min(s.remaining / s.rate for s in state.values())
        else:
            for s in gpu:  # alone again: full speed
                s.rate = 1.0
            dt = min(s.remaining for s in state.values())
        rated = len(gpu) > 1
        now = self._now
        if not math.isfinite(dt) or not math.isfinite(now + dt):  # card values beyond float range
            name = self._wf.name  # type: ignore[union-attr]
            raise TestbedError(f"{name}: simulated time overflowed (card latencies too large)")
        now += dt
        self._now = now
        finished: list[str] = []
        done_below = _EPS * max(1.0, now)
        for t, s in state.items():
            s.remaining -= dt * s.rate if rated else dt
            if s.remaining <= done_below:
                if not s.running:  # load done: start running
                    s.remaining, s.running = s.work_ms, True
                    if s.remaining <= 0:
                        finished.append(t)
                else:
                    finished.append(t)
        return finished

    def abort(self, wait: bool = True) -> dict[str, float]:
        loads = {t: s.load_ms for t, s in self._state.items()}
        self._state = {}
        return loads


class SimTestbed(Driver):
    """The simulated testbed: the driver over a ``SimBackend`` (``world``: a ``World``, a built-in
    name, a file, or ``perturbed:SEED``; default the calibrated ``a5500``)."""

    def __init__(self, *, noise_sigma: float = DEFAULT_NOISE_SIGMA, seed: int | None = 0, cpu_slots: int | None = None,
                 world: str | Path | World | None = None) -> None:
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
