"""Baselines under load, as ``Decider``s:

* ``all-gpu``: every GPU tool ``gpu_now``, per invocation; blind to VRAM in use (oom when it does not fit);
* ``oracle-static``: each workflow's isolated oracle mapping (computed offline by the caller, in
  isolation, on the noise-free simulator), applied to every invocation FCFS: the best mapping for
  a machine to itself, blind to the load (an offline reference, not an online policy);
* ``heft``: HEFT (``policies/heft.py``) per invocation on the card costs (contention- and load-blind);
* ``dmda``: StarPU's dmda over the live state, per task when it becomes ready: the device of earliest
  expected completion, with the GPU as one worker whose expected free time is the expected
  remaining time of the GPU tasks running, plus its own history-based mean (per tool and device,
  learned from every finished task, card value until a first one); the CPU's expected start waits
  for a slot when all are taken. A GPU placement needs its VRAM free now, else the CPU;
* ``least-loaded``: per task, the less loaded device: GPU load = (GPU tasks running + queued) /
  ``GPU_NOMINAL_SLOTS``, CPU load = (slots busy + tasks waiting) / slots; ties to the faster
  device; a GPU placement needs its VRAM free now, else the CPU.

``with_admission`` adds the generic admission rule to any of them (``+adm`` in names): an
invocation waits at the door while the machine has a backlog (a CPU task waiting for a slot, a task
in the GPU queue, or more than ``ADMIT_VRAM_FRACTION`` of the VRAM budget in use).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsched.model.cards import ToolCard
from agentsched.model.live import (
    Decider,
    Invocation,
    MachineSnapshot,
    PlaceDecider,
    PlanDecider,
    StaticDecider,
    TaskDone,
)
from agentsched.model.workflow import Mode
from agentsched.policies.heft import HeftPolicy

GPU_NOMINAL_SLOTS = 4  # least-loaded: GPU tasks counted as a full GPU (its nominal concurrency)
ADMIT_VRAM_FRACTION = 0.8  # generic admission: hold new invocations above this share of the budget


class AllGpu(PlanDecider):
    name = "all-gpu"

    def plan(self, inv: Invocation, live: MachineSnapshot) -> Mapping[str, Mode]:
        return {t: (Mode.GPU_NOW if c.has_gpu else Mode.CPU) for t, c in inv.cards.items()}


class HeftStream(PlanDecider):
    """HEFT per invocation (its plan depends on the workflow only, so it is cached by name)."""

    name = "heft"

    def __init__(self) -> None:
        self._cache: dict[str, dict[str, Mode]] = {}

    def plan(self, inv: Invocation, live: MachineSnapshot) -> Mapping[str, Mode]:
        got = self._cache.get(inv.workflow.name)
        if got is None:
            plan = HeftPolicy().schedule(inv.workflow, inv.cards)
            got = self._cache[inv.workflow.name] = {t: p.mode for t, p in plan.items()}
        return got


def cpu_wait_ms(live: MachineSnapshot) -> float:
    """Expected wait for a CPU slot: 0 with one free, else the CPU backlog (card-based remaining time
    of the running CPU tasks plus the CPU time of the tasks waiting ahead) spread over the slots."""
    if live.cpu_busy + live.cpu_waiting < live.cpu_slots:
        return 0.0
    backlog = sum(v.expected_remaining_ms for v in live.running(gpu=False))
    backlog += live.cpu_waiting_ms
    return backlog / live.cpu_slots


class Dmda(PlaceDecider):
    name = "dmda"
    late_binding = True

    def start_stream(self, workflows: Any, rng: Any) -> None:
        self.history: dict[tuple[str, str], tuple[float, int]] = {}

    def mean_ms(self, card: ToolCard, device: str) -> float:
        total, n = self.history.get((card.name, device), (0.0, 0))
        if n:
            return total / n
        return card.gpu_ms if device == "gpu" else card.cpu_ms  # type: ignore[return-value]

    def place(self, inv: Invocation, task: str, live: MachineSnapshot) -> Mode | None:
        card = inv.cards[task]
        cpu_finish = cpu_wait_ms(live) + self.mean_ms(card, "cpu")
        if card.has_gpu and live.fits_now(card.vram_needed_mb):
            gpu_free = sum(v.expected_remaining_ms for v in live.running(gpu=True))
            if gpu_free + self.mean_ms(card, "gpu") < cpu_finish:
                return Mode.GPU_NOW
        return Mode.CPU

    def observe(self, done: TaskDone) -> None:
        device = "cpu" if done.mode is Mode.CPU else "gpu"
        total, n = self.history.get((done.card.name, device), (0.0, 0))
        self.history[(done.card.name, device)] = (total + done.run_ms, n + 1)


class LeastLoaded(PlaceDecider):
    name = "least-loaded"
    late_binding = True

    def place(self, inv: Invocation, task: str, live: MachineSnapshot) -> Mode | None:
        card = inv.cards[task]
        if not card.has_gpu or not live.fits_now(card.vram_needed_mb):
            return Mode.CPU
        gpu_load = (len(live.running(gpu=True)) + live.queue_length) / GPU_NOMINAL_SLOTS
        cpu_load = (live.cpu_busy + live.cpu_waiting) / live.cpu_slots
        if gpu_load < cpu_load or (gpu_load == cpu_load and card.gpu_ms < card.cpu_ms):  # type: ignore[operator]
            return Mode.GPU_NOW
        return Mode.CPU


def backlog(live: MachineSnapshot) -> bool:
    """The machine has a backlog (the generic admission rule's test; module docstring)."""
    budget = live.vram_budget_mb
    vram_high = budget is not None and live.vram_in_use_mb > ADMIT_VRAM_FRACTION * budget
    return live.cpu_waiting > 0 or live.queue_length > 0 or vram_high


class WithAdmission(Decider):
    """``inner`` behind the generic admission rule."""

    def __init__(self, inner: Decider) -> None:
        self.inner = inner
        self.name = f"{inner.name}+adm"
        self.late_binding = inner.late_binding

    def start_stream(self, workflows: Any, rng: Any) -> None:
        self.inner.start_stream(workflows, rng)

    def admit(self, inv: Invocation, live: MachineSnapshot) -> bool:
        return not backlog(live) and self.inner.admit(inv, live)

    def plan(self, inv: Invocation, live: MachineSnapshot) -> Mapping[str, Mode]:
        return self.inner.plan(inv, live)

    def place(self, inv: Invocation, task: str, live: MachineSnapshot) -> Mode | None:
        return self.inner.place(inv, task, live)

    def observe(self, done: TaskDone) -> None:
        self.inner.observe(done)

    def ended(self, inv: Invocation) -> None:
        self.inner.ended(inv)


def oracle_static(mappings: Mapping[str, Mapping[str, Mode]]) -> StaticDecider:
    """Each workflow's isolated oracle mapping (given by the caller), applied FCFS."""
    return StaticDecider(mappings, "oracle-static")
