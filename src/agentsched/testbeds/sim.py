"""Discrete-event simulated testbed.

Time advances from event to event (a task starts, a load ends, a task ends). Between events every
rate is constant: CPU tasks and loads run at rate 1; GPU tasks at the contention rate of
``contention.gpu_rates``. Admission follows the shared start rules (``rules.Dispatcher``).
Invariants (checked by tests on random DAGs): dependencies respected, one queued task at a time,
VRAM in use never above the budget in an ``ok`` execution, E2E = end of the last sink.

Noise: each task's isolated work (and load) is multiplied by exp(N(0, noise_sigma)), drawn from an
injected ``random.Random``; ``noise_sigma=0`` gives expected values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from agentsched.errors import TestbedError
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.workflow import Mode, Workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.contention import gpu_rates
from agentsched.testbeds.rules import Dispatcher, Infeasible

_EPS = 1e-9
MAX_NOISE_SIGMA = 1.0  # log-normal sigma; 1.0 already spreads latencies by e^+-1 (one sigma)


def _vram_point(timeline: list[tuple[float, float]], now: float, vram_mb: float) -> None:
    """Append (now, vram_mb) to a step curve: one point per instant, none when unchanged."""
    if timeline and timeline[-1][0] == now:
        timeline.pop()
    if not timeline or timeline[-1][1] != vram_mb:
        timeline.append((now, vram_mb))


class SimTestbed(Testbed):
    """Simulated host: many CPU cores, one GPU with a VRAM budget and contention."""

    name = "sim"

    def __init__(
        self, *, noise_sigma: float = 0.03, seed: int | None = 0, cpu_slots: int | None = None
    ) -> None:
        if not (math.isfinite(noise_sigma) and 0 <= noise_sigma <= MAX_NOISE_SIGMA):
            raise TestbedError(f"noise_sigma must be in [0, {MAX_NOISE_SIGMA:g}], got {noise_sigma}")
        if cpu_slots is not None and cpu_slots < 1:
            raise TestbedError(f"cpu_slots must be >= 1, got {cpu_slots}")
        self.noise_sigma = noise_sigma  # log-normal sigma of per-task multiplicative noise
        self.cpu_slots = cpu_slots  # cap on concurrent CPU tasks (None: unbounded many-core host)
        self.rng = random.Random(seed)  # default generator when run() gets none
        self.deterministic = noise_sigma == 0

    def noise_free(self) -> SimTestbed:
        return SimTestbed(noise_sigma=0.0, seed=None, cpu_slots=self.cpu_slots)

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution:
        return self._run(workflow, mapping, None)

    def run(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None
    ) -> Execution:
        return self._run(workflow, mapping, rng if rng is not None else self.rng)

    def _run(self, workflow: Workflow, mapping: Mapping[str, Mode], rng: random.Random | None) -> Execution:
        cards = workflow.task_cards
        sigma = self.noise_sigma if rng is not None else 0.0
        disp = Dispatcher(workflow, mapping, cards, cpu_slots=self.cpu_slots)
        preds = workflow.preds

        # per running task: [remaining_ms, phase(0 load, 1 run), on_gpu, sens, press]
        state: dict[str, list] = {}
        ready_at: dict[str, float] = {t: 0.0 for t in workflow.task_ids if not preds[t]}
        starts_at: dict[str, float] = {}
        ends_at: dict[str, float] = {}
        loads: dict[str, float] = {}
        vram_of: dict[str, float] = {}
        order: list[str] = []
        vram_timeline: list[tuple[float, float]] = [(0.0, 0.0)]  # step curve of VRAM in use
        peak = 0.0
        now = 0.0

        def noisy(x: float) -> float:
            return x * math.exp(rng.gauss(0.0, sigma)) if sigma > 0 and rng is not None else x

        while True:
            decision = disp.poll()
            if isinstance(decision, Infeasible):
                spans = self._spans(workflow, mapping, order, ready_at, starts_at, ends_at, loads, vram_of)
                return Execution(
                    status=Status.OOM, mapping=dict(mapping), e2e_ms=None, elapsed_ms=now,
                    peak_vram_mb=max(peak, decision.needed_mb), spans=spans,
                    vram_timeline=tuple(vram_timeline), message=decision.message, testbed=self.name,
                    extra={"failed_task": decision.task},
                )
            for st in decision:
                card = cards[st.task]
                order.append(st.task)
                starts_at[st.task] = now
                vram_of[st.task] = st.vram_mb
                on_gpu = st.mode is not Mode.CPU and card.has_gpu
                work = card.gpu_ms if on_gpu else card.cpu_ms
                sens, press = card.contention() if on_gpu else (0.0, 0.0)
                load = noisy(st.load_ms) if st.load_ms > 0 else 0.0
                loads[st.task] = load
                # a queued task's run work is drawn now too, so the rng stream is mapping-stable
                state[st.task] = [load, 0, on_gpu, sens, press, noisy(work)]
                if load <= 0:
                    state[st.task][0], state[st.task][1] = state[st.task][5], 1
            if decision:
                _vram_point(vram_timeline, now, disp.vram_in_use_mb)
                peak = max(peak, disp.vram_in_use_mb)
            if not state:
                break
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
            if not math.isfinite(dt) or not math.isfinite(now + dt):  # card values beyond float range
                raise TestbedError(f"{workflow.name}: simulated time overflowed (card latencies too large)")
            now += dt
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
            for t in sorted(finished, key=workflow.task_index.__getitem__):
                del state[t]
                ends_at[t] = now
                for nt in disp.finish(t):
                    ready_at[nt] = now
            if finished:
                _vram_point(vram_timeline, now, disp.vram_in_use_mb)

        spans = self._spans(workflow, mapping, order, ready_at, starts_at, ends_at, loads, vram_of)
        e2e = max(ends_at[t] for t in workflow.sinks)
        return Execution(
            status=Status.OK, mapping=dict(mapping), e2e_ms=e2e, elapsed_ms=e2e, peak_vram_mb=peak,
            spans=spans, vram_timeline=tuple(vram_timeline), testbed=self.name,
        )

    @staticmethod
    def _spans(workflow, mapping, order, ready_at, starts_at, ends_at, loads, vram_of) -> tuple[TaskSpan, ...]:
        cards = workflow.task_cards
        return tuple(
            TaskSpan(
                task=t, tool=cards[t].name, mode=mapping[t], ready_ms=ready_at.get(t, starts_at[t]),
                start_ms=starts_at[t], end_ms=ends_at.get(t), load_ms=loads.get(t, 0.0),
                vram_mb=vram_of.get(t, 0.0),
            )
            for t in order
        )
