"""The discrete-event kernel of the simulated machine: the one class that advances simulated time.

Every simulated run goes through a ``Kernel``: the one-run testbed (``sim.SimBackend``, one
invocation) and the stream simulator (``stream.StreamSim``, many invocations sharing the machine,
in simulated or scaled real time). Who may start is not decided here: the callers ask the start
rules of ``model/rules.py`` and hand the kernel the starts; the kernel runs them.

Time advances from event to event (a task ends, a queued task's load ends). Between events every
rate is constant: CPU tasks and loads run at rate 1; GPU tasks in their run phase at the rate the
contention law of the simulated *world* gives them together (``world.py``, ``laws.py``), which no
scheduler sees. Noise: a started task's isolated load and work are each multiplied by the world's
noise factor drawn from the injected ``random.Random``, load first, then work (sigma 0 or no
generator: expected values), so the draw order is the order of starts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentsched.errors import TestbedError
from agentsched.model.cards import ToolCard, split_amplified
from agentsched.model.execution import TaskSpan
from agentsched.model.workflow import Mode
from agentsched.testbeds.laws import rate_function
from agentsched.testbeds.noise import noise_factor
from agentsched.testbeds.world import World

_EPS = 1e-9


@dataclass(slots=True)
class Running:
    """A started task in the kernel (its load phase, then its run phase)."""

    key: Any  # the caller's handle (a task id; an (invocation, task) pair)
    card: ToolCard
    mode: Mode  # where it really runs
    vram_mb: float  # what it holds until it ends
    on_gpu: bool  # runs on the GPU (contends) rather than on the host
    remaining: float  # ms of isolated work left in the current phase
    loading: bool  # a queued task still loading its model
    sens: float  # the world's contention parameters of its tool (0, 0 on the host)
    press: float
    work_ms: float  # its isolated run work, noise drawn at start
    load_ms: float  # its load, noise drawn (0: none)
    start_ms: float  # when it started (a queued task: before loading)
    run_start_ms: float  # when its run phase began
    ready_ms: float  # when it became ready (the caller's)
    unit: str  # its unit tool (clip for clip_x12): the key of the overlap integrals
    rate: float = 1.0  # work per ms until the next event (below 1: slowed by GPU co-runners)
    seen: dict[str, float] | None = None  # GPU runs: the overlap integrals when the run phase began

    def span(self, end_ms: float, origin_ms: float = 0.0, task: str | None = None) -> TaskSpan:
        """This task's typed span, ended at ``end_ms``, on a clock whose zero is ``origin_ms``."""
        return TaskSpan(
            task=task if task is not None else str(self.key),
            tool=self.card.name,
            mode=self.mode,
            ready_ms=self.ready_ms - origin_ms,
            start_ms=self.start_ms - origin_ms,
            end_ms=end_ms - origin_ms,
            load_ms=self.load_ms,
            vram_mb=self.vram_mb,
        )


class Kernel:
    """The simulated machine's clock and the tasks running on it (module docstring).

    ``start`` a task the start rules admitted; ``step`` to the next event (the tasks that ended
    there); ``advance_to`` a time no task ends before. ``track_overlap``: keep, per unit tool, the
    integral over time of its GPU runs (what a learning decider is told, ``model/live.overlap_since``)
    and the time the GPU was busy; the one-run testbed needs neither.
    """

    def __init__(
        self,
        world: World,
        *,
        noise_sigma: float,
        rng: random.Random | None,
        track_overlap: bool = False,
        label: str = "simulation",
    ) -> None:
        self.now_ms = 0.0
        self.runs: list[Running] = []
        self.version = 0  # bumped whenever a task starts, stops, ends or ends its load (deciders cache per version)
        self.label = label  # names the run in an overflow error
        self.track_overlap = track_overlap
        self.overlap: dict[str, float] = {}  # unit tool -> integral of its running GPU tasks over time
        self.gpu_busy_ms = 0.0  # time with at least one GPU task in its run phase
        self.set_world(world)
        self.set_noise(rng, noise_sigma)

    def set_world(self, world: World) -> None:
        """Put ``world`` in effect for the starts that follow."""
        self.world = world
        self._rates: Callable[..., list[float]] = rate_function(world.law)
        self._default_noise = world.noise.is_default  # exp(gauss) inline: the default world's stream
        self._params: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}

    def set_noise(self, rng: random.Random | None, noise_sigma: float) -> None:
        """The generator noise is drawn from (None: expected values) and its sigma."""
        self.rng = rng
        self._sigma = noise_sigma if rng is not None else 0.0

    def reset(self) -> None:
        """An empty machine at time 0 (the next run's)."""
        self.now_ms = 0.0
        self.runs = []
        self.overlap = {}
        self.gpu_busy_ms = 0.0

    # ---- starts ---------------------------------------------------------------------------------
    def start(
        self, key: Any, card: ToolCard, mode: Mode, *, vram_mb: float, load_ms: float, ready_ms: float = 0.0
    ) -> Running:
        """Start a task now on ``mode`` (where it really runs), holding ``vram_mb``, paying ``load_ms``
        (the rules' predicted load; gpu_queue only) first. Noise: load first, then work."""
        on_gpu = mode is not Mode.CPU and card.has_gpu
        unit = split_amplified(card.name)[0]
        sens, press = self._contention(card) if on_gpu else (0.0, 0.0)
        load = self._noisy(load_ms) if load_ms > 0 else 0.0
        # a queued task's run work is drawn now too, so the rng stream is mapping-stable
        work = self._noisy((card.gpu_ms if on_gpu else card.cpu_ms) or 0.0)
        now = self.now_ms
        r = Running(
            key,
            card,
            mode,
            vram_mb,
            on_gpu,
            load if load > 0 else work,
            load > 0,
            sens,
            press,
            work,
            load,
            now,
            now,
            ready_ms,
            unit,
        )
        if on_gpu and not r.loading and self.track_overlap:
            r.seen = dict(self.overlap)
        self.runs.append(r)
        self.version += 1
        return r

    def stop(self, r: Running) -> None:
        """Take a started task off the machine before it ends (its invocation failed)."""
        self.runs.remove(r)
        self.version += 1

    def _contention(self, card: ToolCard) -> tuple[float, float]:
        key = (card.name, card.tags)
        hit = self._params.get(key)
        if hit is None:  # looked up once per tool: this runs for every GPU start
            hit = self._params[key] = self.world.params(card)
        return hit

    def _noisy(self, x: float) -> float:
        rng = self.rng
        if self._sigma <= 0 or rng is None:
            return x
        if self._default_noise:
            return x * math.exp(rng.gauss(0.0, self._sigma))
        return x * noise_factor(rng, self._sigma, self.world.noise)

    # ---- time -----------------------------------------------------------------------------------
    def next_dt(self) -> float:
        """Time to the next event (inf when nothing runs); sets every run's rate until then."""
        runs = self.runs
        if not runs:
            return math.inf
        gpu = [r for r in runs if r.on_gpu and not r.loading]
        if len(gpu) > 1:
            for r, rate in zip(gpu, self._rates([r.sens for r in gpu], [r.press for r in gpu]), strict=True):
                r.rate = rate
            return min(r.remaining / r.rate for r in runs)
        for r in gpu:  # alone again: full speed
            r.rate = 1.0
        return min(r.remaining for r in runs)

    def step(self) -> list[Running]:
        """Advance to the next event; the tasks that ended there (in start order), off the machine."""
        return self.step_within(math.inf)  # type: ignore[return-value]

    def step_within(self, t_ms: float) -> list[Running] | None:
        """``step`` when the next event comes no later than ``t_ms``; else None, and the clock stays
        (the rates until the next event are set: ``advance_to`` may follow)."""
        dt = self.next_dt()
        if self.now_ms + dt > t_ms:
            return None
        if not math.isfinite(dt) or not math.isfinite(self.now_ms + dt):  # card values beyond float range
            raise TestbedError(f"{self.label}: simulated time overflowed (card latencies too large)")
        self._pass(dt)
        return self._collect()

    def advance_to(self, t_ms: float) -> None:
        """Let time pass to ``t_ms``, which no event comes before (``step_within(t_ms)`` said None,
        and set the rates until then)."""
        if t_ms > self.now_ms:
            self._pass(t_ms - self.now_ms)
            self.now_ms = t_ms  # exact: no drift from summed dts

    def _pass(self, dt: float) -> None:
        if dt <= 0:
            return
        busy = False
        overlap = self.overlap if self.track_overlap else None
        for r in self.runs:
            if r.on_gpu and not r.loading:
                r.remaining -= dt * r.rate
                busy = True
                if overlap is not None:
                    overlap[r.unit] = overlap.get(r.unit, 0.0) + dt
            else:
                r.remaining -= dt
        if busy:
            self.gpu_busy_ms += dt
        self.now_ms += dt

    def _collect(self) -> list[Running]:
        finished = []
        now = self.now_ms
        below = _EPS * max(1.0, now)
        for r in self.runs:
            if r.remaining <= below:
                if r.loading:  # load done: the run phase begins
                    r.loading, r.remaining, r.run_start_ms = False, r.work_ms, now
                    self.version += 1
                    if self.track_overlap and r.on_gpu:
                        r.seen = dict(self.overlap)
                    if r.remaining > below:
                        continue
                finished.append(r)
        if finished:
            ended = {id(r) for r in finished}
            self.runs = [r for r in self.runs if id(r) not in ended]
            self.version += 1
        return finished
