"""Discrete-event simulated testbed: the driver's ``sim`` backend.

Time advances from event to event (a task starts, a load ends, a task ends). Between events every
rate is constant: CPU tasks and loads run at rate 1; GPU tasks at the contention rate of
``contention.gpu_rates`` with the parameters of the simulated *world* (``world.py``; the calibrated
``a5500`` by default), which no scheduler sees. Admission follows the shared start rules (``rules.Dispatcher``, through
``driver.Driver``). Invariants (checked by tests on random DAGs): dependencies respected, one
queued task at a time, VRAM in use never above the budget in an ``ok`` execution, E2E = end of the
last sink.

Noise: each task's isolated work (and load) is multiplied by exp(N(0, noise_sigma)), drawn from an
injected ``random.Random`` when the task starts (load first, then work); ``noise_sigma=0`` gives
expected values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard
from agentsched.model.workflow import Mode, Workflow
from agentsched.model.contention import gpu_rates
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure
from agentsched.model.rules import Start
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, MAX_NOISE_SIGMA
from agentsched.testbeds.world import World, load_world

_EPS = 1e-9


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
        self.noise_sigma = noise_sigma  # log-normal sigma of per-task multiplicative noise
        self._cpu_slots = cpu_slots  # cap on concurrent CPU tasks (None: unbounded many-core host)
        self.rng = random.Random(seed)  # default generator when a run gets none
        self.deterministic = noise_sigma == 0
        self.world = load_world(world)  # GPU contention of the simulated machine (default a5500)
        self._params: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}  # world.params by tool
        # per run: the workflow, its cards, the noise generator (None: expected values), the clock,
        # and per running task [remaining_ms, phase(0 load, 1 run), on_gpu, sens, press, work_ms, start_ms, load_ms]
        self._wf: Workflow | None = None
        self._cards: dict = {}
        self._run_rng: random.Random | None = None
        self._sigma = 0.0
        self._now = 0.0
        self._state: dict[str, list] = {}

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

    def _noisy(self, x: float) -> float:
        rng = self._run_rng
        return x * math.exp(rng.gauss(0.0, self._sigma)) if self._sigma > 0 and rng is not None else x

    def start(self, start: Start, inputs: Mapping[str, Any] | None) -> None:
        card = self._cards[start.task]
        on_gpu = start.mode is not Mode.CPU and card.has_gpu
        work = card.gpu_ms if on_gpu else card.cpu_ms
        sens, press = self._contention(card) if on_gpu else (0.0, 0.0)
        load = self._noisy(start.load_ms) if start.load_ms > 0 else 0.0
        # a queued task's run work is drawn now too, so the rng stream is mapping-stable
        s = [load, 0, on_gpu, sens, press, self._noisy(work), self._now, load]
        if load <= 0:
            s[0], s[1] = s[5], 1
        self._state[start.task] = s

    def _contention(self, card: ToolCard) -> tuple[float, float]:
        key = (card.name, card.tags)
        hit = self._params.get(key)
        if hit is None:  # looked up once per tool: this runs for every GPU start
            hit = self._params[key] = self.world.params(card)
        return hit

    def wait(self) -> list[Completion]:
        while True:  # a step may only end a load: advance until a task ends
            finished = self._step()
            if finished:
                order = self._wf.task_index.__getitem__  # type: ignore[union-attr]
                out = []
                for t in sorted(finished, key=order):
                    s = self._state.pop(t)
                    out.append(Completion(t, s[6], self._now, s[7]))
                return out

    def _step(self) -> list[str]:
        """Advance to the next event; the tasks that ended there."""
        state = self._state
        # rates between now and the next event
        gpu_tasks = [t for t, s in state.items() if s[2] and s[1] == 1]
        rates = {t: 1.0 for t in state}
        if len(gpu_tasks) > 1:
            for t, r in zip(
                gpu_tasks,
                gpu_rates([state[t][3] for t in gpu_tasks], [state[t][4] for t in gpu_tasks]),
                strict=True,
            ):
                rates[t] = r
        dt = min(s[0] / rates[t] for t, s in state.items())
        now = self._now
        if not math.isfinite(dt) or not math.isfinite(now + dt):  # card values beyond float range
            name = self._wf.name  # type: ignore[union-attr]
            raise TestbedError(f"{name}: simulated time overflowed (card latencies too large)")
        now += dt
        self._now = now
        finished: list[str] = []
        for t, s in state.items():
            s[0] -= dt * rates[t]
            if s[0] <= _EPS * max(1.0, now):
                if s[1] == 0:  # load done: start running
                    s[0], s[1] = s[5], 1
                    if s[0] <= 0:
                        finished.append(t)
                else:
                    finished.append(t)
        return finished

    def abort(self) -> dict[str, float]:
        loads = {t: s[7] for t, s in self._state.items()}
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
        return self.backend.world  # type: ignore[attr-defined]

    @property
    def noise_sigma(self) -> float:
        return self.backend.noise_sigma  # type: ignore[attr-defined]

    @property
    def cpu_slots(self) -> int | None:
        return self.backend.cpu_slots

    @property
    def rng(self) -> random.Random:
        return self.backend.rng  # type: ignore[attr-defined]
