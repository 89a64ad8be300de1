"""The four evidence streams a scheduler agent reads, as one frozen view per round.

1. DAG topology and execution semantics (the workflow);
2. tools: full profile cards in warm start, only names, tags and one-line workload descriptions in
   cold start;
3. execution history (per round: mapping, feasibility, E2E, peak VRAM) and the best-ever mapping;
4. the monitor's what-if data (running averages, reprobes, swaps, hints);
5. optionally (``AgentPolicy(predictions=True)``), the model predictions: the agent-plan planner's
   top candidate mappings with predicted E2E, peak VRAM and an uncertainty. Predictions, not
   measurements and not instructions; the rules reasoner never reads them;
6. optionally, the load at decision time (``LoadEvidence``, from a stream's live state when the
   decision is made while other invocations share the machine): GPU tasks running with their
   expected remaining time, VRAM in use, GPU queue, CPU slots busy. Measured state, never advice.

Both reasoners (``rules`` and ``llm``) read exactly this; the prompt builder renders it as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentsched.model.cards import ToolCard
from agentsched.model.live import MachineSnapshot
from agentsched.model.mapping import MappingT
from agentsched.model.workflow import Workflow
from agentsched.monitor.records import BestMapping, Evidence, Hint, HistoryEntry


@dataclass(frozen=True)
class ToolView:
    """What the agent knows about one task's tool."""

    task: str  # task id
    tool: str  # tool label, e.g. clip_x12
    workload: str  # one-line description
    tags: tuple[str, ...]  # semantic tags (compute-bound, memory-bound, io-bound, ...)
    card: ToolCard | None  # the isolated profile (warm start); None in cold start


@dataclass(frozen=True)
class Measured:
    """One mapping the agent has evidence about (a round or a monitor probe)."""

    mapping: MappingT  # the complete mapping
    mean_e2e_ms: float | None  # mean E2E over its feasible runs; None when some run was infeasible
    samples: int  # feasible runs pooled
    was_round: bool  # True when it was proposed as a round (else only probed)


@dataclass(frozen=True)
class PredictedMapping:
    """One candidate of the planner's model: what it expects of a mapping (never measured by the model)."""

    mapping: MappingT  # the complete mapping
    e2e_ms: float  # predicted E2E at the posterior mean of the model
    e2e_low_ms: float  # low end of the predicted range (a low quantile over posterior draws)
    e2e_high_ms: float  # high end of the predicted range
    peak_vram_mb: float  # predicted peak VRAM held (within the budget: infeasible mappings are never listed)


@dataclass(frozen=True)
class ModelPredictions:
    """The fifth stream: the planner's top candidates under its online model, best predicted first."""

    candidates: tuple[PredictedMapping, ...]  # sorted by predicted E2E; empty when the model knows too little
    executions: int  # executions the model has been fitted to (rounds' runs and probes)
    noise_sigma: float  # the model's estimate of run-to-run log-latency noise (0.03 ~ +-3% per task)
    draws: int  # posterior draws behind each range
    quantiles: tuple[float, float]  # the range's quantiles, e.g. (0.1, 0.9)
    evaluated: int  # mappings the planner's search evaluated
    exhaustive: bool  # True when it evaluated every mapping
    note: str = ""  # why there are no candidates (e.g. cold start before any execution)


@dataclass(frozen=True)
class GpuTaskNow:
    """One task on the GPU now (another invocation's, or this one's), as the load evidence shows it."""

    tool: str  # tool label, e.g. clip_x12
    mode: str  # gpu_now or gpu_queue
    loading: bool  # a queued task still loading its model
    elapsed_ms: float  # since it started
    expected_remaining_ms: float  # card-based (isolated) remaining time: contention would stretch it
    vram_mb: float  # VRAM it holds


@dataclass(frozen=True)
class LoadEvidence:
    """The sixth stream: the machine's load when the decision is made (``MachineSnapshot``, never the world)."""

    gpu_tasks: tuple[GpuTaskNow, ...]  # running or loading on the GPU, longest expected remaining first
    vram_in_use_mb: float
    vram_budget_mb: float | None  # the shared budget; None: unbounded
    queue_length: int  # tasks waiting in the GPU queue
    queue_backlog_ms: float  # their card load + GPU time, together
    cpu_busy: int  # CPU slots taken
    cpu_slots: int
    cpu_waiting: int  # tasks waiting for a CPU slot
    admission_waiting: int  # invocations held at admission
    in_flight: int  # invocations admitted and not finished

    @classmethod
    def from_live(cls, live: MachineSnapshot) -> LoadEvidence:
        """A snapshot of ``live`` now (what a decider under load may see)."""
        gpu = sorted(live.running(gpu=True), key=lambda v: -v.expected_remaining_ms)
        tasks = tuple(
            GpuTaskNow(v.card.name, v.mode.value, v.loading, v.elapsed_ms, v.expected_remaining_ms, v.vram_mb)
            for v in gpu
        )
        return cls(
            tasks,
            live.vram_in_use_mb,
            live.vram_budget_mb,
            live.queue_length,
            live.queue_backlog_ms,
            live.cpu_busy,
            live.cpu_slots,
            live.cpu_waiting,
            live.admission_waiting,
            live.in_flight,
        )

    @property
    def idle(self) -> bool:
        """Nothing runs or waits: no load to report."""
        return not (self.gpu_tasks or self.queue_length or self.cpu_busy or self.cpu_waiting or self.admission_waiting)


@dataclass(frozen=True)
class AgentView:
    """Everything one proposal may use. Never contains the oracle."""

    workflow: Workflow  # DAG, decision space, VRAM budget
    start: str  # "warm" or "cold"
    tools: dict[str, ToolView]  # task id -> tool view
    round: int  # the round to propose for (0-based)
    rounds: int | None  # rounds in the run; None: endless (a runtime), no last round
    history: tuple[HistoryEntry, ...]  # rounds so far
    best: BestMapping | None  # best feasible round mapping so far
    evidence: Evidence | None  # the monitor's evidence after the last round (None before round 1)
    measured: tuple[Measured, ...]  # every mapping measured so far (rounds and probes)
    observed_vram_mb: dict[str, float]  # task -> VRAM seen held on the GPU
    monitor_enabled: bool  # False in the "no monitor" ablation: streams 4 is empty
    stability: float  # adopt a what-if only if it beats the best by more than this fraction
    predictions: ModelPredictions | None = None  # stream 5; None unless the agent's predictions option is on
    load: LoadEvidence | None = None  # stream 6; None unless the decision is made under a stream's load

    @property
    def hints(self) -> tuple[Hint, ...]:
        return () if self.evidence is None else self.evidence.hints

    @property
    def warm(self) -> bool:
        return self.start == "warm"

    @property
    def concurrent(self) -> Mapping[str, frozenset[str]]:
        """Tasks that may overlap each task in time (the workflow's overlap sets)."""
        return self.workflow.concurrent

    def vram_mb(self, task: str) -> float | None:
        """VRAM the task holds on the GPU: its card (warm), else what was observed, else unknown."""
        tv = self.tools[task]
        if tv.card is not None:
            return tv.card.vram_needed_mb
        return self.observed_vram_mb.get(task)

    def measured_for(self, mapping: MappingT) -> Measured | None:
        for m in self.measured:
            if m.mapping == mapping:
                return m
        return None

    def known_infeasible(self, mapping: MappingT) -> bool:
        m = self.measured_for(mapping)
        return m is not None and m.mean_e2e_ms is None

    def was_round(self, mapping: MappingT) -> bool:
        return any(h.mapping == mapping for h in self.history)

    @property
    def topology(self) -> str:
        wf = self.workflow
        if not wf.edges:
            return "fan-out"
        ids = wf.task_ids
        if len(ids) == 4 and set(wf.edges) == {(ids[0], ids[1]), (ids[0], ids[2]), (ids[1], ids[3]), (ids[2], ids[3])}:
            return "diamond"
        return "DAG"
