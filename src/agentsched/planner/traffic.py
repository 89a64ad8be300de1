"""The traffic-aware decider: places the tasks of many invocations sharing one machine (``traffic-aware``).

Late binding: each task is placed when it becomes ready, from the live state (``MachineSnapshot``: GPU
tasks running with their card-based remaining time, VRAM in use, GPU queue, CPU slots busy and
waiting) and the contention it has learned across invocations (``traffic_learn.py``); never the
world. For a ready task it predicts the finish of every option, and prices each by the predicted
end of its *invocation* (``traffic_slack.py``: a task whose siblings end later anyway has slack),
plus a tenth of its own finish, plus the delay it inflicts on other GPU tasks:

* ``cpu``: the wait for a slot (``cpu_wait_ms``) plus its CPU time; for a task with slack (or any
  task while invocations wait at the door) while tasks wait for a slot, plus the delay its slot
  time inflicts on the queue (``cpu_harm_ms``);
* ``gpu_now`` (only when its VRAM fits now: never an oom): its GPU time slowed by the learned
  pressure of the GPU tasks running, each counted for the part of its run it will overlap, and
  never less than the GPU's time-averaged pressure (co-runners leave, others come); plus the
  delay it inflicts (``harm_weight`` x the sum over the running tasks j of
  T_j s_j p / (1 + s_j (P_j + p)), T_j their overlap, P_j the pressure j already bears): a
  start that would slow others more than it gains is not worth it;
* ``hold`` (wait for the GPU, when its VRAM does not fit now or the GPU is crowded): the GPU work
  of the tasks held before it, plus the expected time until the running GPU tasks free enough VRAM
  / the first of them finishes, then a less contended run (``None`` to the simulator: asked again
  at the next event). While its VRAM fits, chosen only when ``hold_margin`` cheaper than the best
  start now; when it does not fit (the GPU's only route), priced as the start it leads to, its
  finish stretched by 1 / ``vram_hold_margin`` (the least certain prediction) plus the harm of that
  later run and the delay it inflicts on the invocations at the door (``door_harm_ms``: the door
  stays shut while it waits), and chosen when cheaper than the best start now. A ready sibling
  not placed yet is counted the same way, but for the door's delay (a full GPU alone does not
  give its siblings slack);
* ``gpu_queue`` (three-way workflows): the queue's backlog, or the wait until the running GPU tasks
  free the VRAM it or a task queued before it needs (``vram_free_ms``), whichever is longer; then
  its load and a contended run; stretched by 1 / ``vram_hold_margin`` when its VRAM does not fit now.

Admission: an invocation waits at the door while a task it placed waits for VRAM (held: its VRAM
does not fit beside what runs), or while both devices are saturated: every CPU slot busy with
tasks waiting, and the GPU's predicted slowdown for a new task above ``admit_slowdown``. It then
starts when they drain, in arrival order, so older invocations finish before newer ones crowd
them (what cuts the tail). ``admission=False`` turns it off (``traffic-aware-noadm``).

Its tuned numbers are one ``TrafficConfig`` (``traffic_config.py``: where they were chosen), a
constructor parameter. The guide is ``docs/load.md``; the measurements behind each rule are in
``docs/results/load-tuning.md``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentsched.model.cards import ToolCard
from agentsched.model.live import Invocation, MachineSnapshot, PlaceDecider, RunningView, TaskDone
from agentsched.model.workflow import Mode, Workflow, fits_vram
from agentsched.planner.traffic_config import DEFAULT_CONFIG, TrafficConfig
from agentsched.planner.traffic_learn import ContentionLearner, MeasuredRatio
from agentsched.planner.traffic_slack import InvocationEnds
from agentsched.policies.traffic.baselines import cpu_wait_ms


@dataclass(slots=True)
class TimeAverage:
    """An exponential time average of a value sampled at decisions, each sample held until the
    next: ``sample(now_ms, value)``, then ``value`` is the average up to ``now_ms``."""

    tau_ms: float
    value: float = 0.0
    _last: float = 0.0
    _time_ms: float = 0.0

    def sample(self, now_ms: float, value: float) -> None:
        dt = max(0.0, now_ms - self._time_ms)
        self.value += (1.0 - math.exp(-dt / self.tau_ms)) * (self._last - self.value)
        self._last, self._time_ms = value, now_ms


@dataclass(frozen=True, slots=True)
class _Gpu:
    """A running GPU task as the planner models it."""

    remaining_ms: float  # contended remaining time
    vram_mb: float
    s: float
    p: float
    loading: bool
    foreign: float = 0.0  # the learned pressure of its co-runners now


@dataclass(frozen=True, slots=True)
class _Cost:
    """The cost of an option for one ready task (``TrafficPlanner._cost_of``): the predicted end of its
    invocation from now, ``max(finish + tail, others)`` (``traffic_slack.py``), plus ``slack_tie`` x
    its own finish (among options that end the invocation alike, the faster), plus its harm."""

    tail_ms: float  # what must still run after the task
    others_ms: float  # the latest predicted end of the tasks of its invocation that may overlap it
    slack_tie: float = DEFAULT_CONFIG.slack_tie

    def __call__(self, finish_ms: float, harm_ms: float) -> float:
        return max(finish_ms + self.tail_ms, self.others_ms) + self.slack_tie * finish_ms + harm_ms

    def has_slack(self, finish_ms: float) -> bool:
        """Does an option ending at ``finish_ms`` leave the invocation's end to a sibling?"""
        return finish_ms + self.tail_ms < self.others_ms


def cpu_harm_ms(card: ToolCard, live: MachineSnapshot, weight: float = DEFAULT_CONFIG.cpu_harm_weight) -> float:
    """The delay a CPU run inflicts on other CPU tasks: none while no task waits for a slot; when
    tasks already wait, its slot time ``cpu_ms`` is taken from a queue that drains ``cpu_slots`` at
    a time, and the tasks waiting now (a saturated queue tends to stay) tell how many will wait
    behind it. Charged to a task with slack, or while invocations wait at the door
    (``_best_start``). Why: without it a task with slack (its sibling ends later anyway) is priced
    free on the CPU however long it holds a slot, while its GPU harm counts: on a mix whose CPU
    demand is near the slots, slow CPU runs of GPU tools (clip 2 s, against 0.1 s on the GPU)
    saturate the CPU and the stream's backlog grows without bound at high load."""
    waiting = live.cpu_waiting
    return weight * card.cpu_ms * waiting / live.cpu_slots if waiting else 0.0


def waits_for_one_run(need_mb: float, biggest_mb: float, in_use_mb: float, budget_mb: float | None) -> bool:
    """Does a task of ``need_mb`` that does not fit now wait for one running task alone: it cannot
    run beside the largest one running (``biggest_mb``) even on an otherwise empty GPU, and fits
    once that one ends? Not a wait for the crowd to thin, which each new invocation prolongs."""
    return (
        budget_mb is not None
        and not fits_vram(biggest_mb, need_mb, budget_mb)
        and fits_vram(in_use_mb - biggest_mb, need_mb, budget_mb)
    )


def door_harm_ms(
    run_ms: float, at_door: float, vram_share: float = 1.0, weight: float = DEFAULT_CONFIG.door_harm_weight
) -> float:
    """The delay a hold for VRAM inflicts on the ``at_door`` invocations waiting at admission (the
    planner passes their time average over ``door_tau_ms``, not the count of now: a burst that fills
    the door for a few seconds would send 6.4 GB models to 19 s CPU runs). The door stays shut
    until every task held for VRAM fits (``TrafficPlanner.admit``); holds queued for
    VRAM fit one after the other as runs before them free it, so one more hold keeps the door shut
    about one GPU run longer: its own ``run_ms`` stands in for it. Counted in full by each hold
    (not shared among them), and also while the door is shut for saturated devices. Why: the door
    hides the backlog from placement. Under overload a hold's own wait stays short (the door keeps
    new work out), so without this delay a 6.4 GB llama_3b (768 ms on the GPU, 19 s on the CPU)
    keeps waiting for the GPU while invocations wait at the door for tens of seconds and most CPU
    slots idle.

    ``vram_share``: the hold's VRAM over the budget (at most 1). The GPU runs tasks side by side
    while their VRAM fits, so holds queued for VRAM fit one after the other only when each needs
    the GPU's memory to itself (a 6.4 GB model on 8-12 GB); a hold of a small share waits for its
    share of the VRAM-time, run_ms x vram / budget (as ``cpu_harm_ms`` charges a CPU run its slot
    time over the slots). Why: charged a whole run each, small holds (250-660 MB on a full 8192 MB
    GPU) are priced many times their delay and send CPU runs of seconds, of tools that take 0.1-0.4 s
    on the GPU, to a saturated CPU; the CPU then shuts the door too, which raises the charge again."""
    return weight * run_ms * at_door * max(0.0, min(1.0, vram_share))


def vram_free_ms(
    need_mb: float, by_end: Sequence[_Gpu], in_use_mb: float, budget_mb: float | None
) -> tuple[float, int]:
    """(the expected wait until ``need_mb`` fits beside the GPU tasks running, how many of them end
    first): ``by_end`` are those tasks in the order of their remaining time; (0, 0) when it fits now."""
    wait, k = 0.0, 0
    while k < len(by_end) and not fits_vram(in_use_mb, need_mb, budget_mb):
        in_use_mb -= by_end[k].vram_mb
        wait = by_end[k].remaining_ms
        k += 1
    return wait, k


def _remaining_ms(v: RunningView, slowdown: float, late_fraction: float) -> float:
    """Contended remaining time of a running task: its card time stretched by its current slowdown,
    minus what has elapsed; a task already past that estimate is given a fraction of it (it is late,
    not done: the card-based ``expected_remaining_ms`` would say 0 and hide it)."""
    if v.loading:
        return v.expected_remaining_ms
    total = (v.card.gpu_ms or v.card.cpu_ms) * (1.0 + slowdown)
    return max(total - v.elapsed_ms, late_fraction * total)


class TrafficPlanner(PlaceDecider):
    """The load-aware placement of the module docstring."""

    late_binding = True

    def __init__(
        self,
        *,
        admission: bool = True,
        learned: Mapping[str, tuple[float, float, int]] | None = None,
        ratios: Mapping[str, float] | None = None,
        config: TrafficConfig | Mapping[str, object] | None = None,
    ) -> None:
        # the tuned constants (traffic_config.py): one object, validated there
        self.config = config if isinstance(config, TrafficConfig) else TrafficConfig.model_validate(config or {})
        self.admission = admission
        self.name = "traffic-aware" if admission else "traffic-aware-noadm"
        # contention learned before (unit -> (s, p, runs), ContentionLearner.learned) and measured
        # ratios (unit -> log ratio, MeasuredRatio.log_ratio): each stream starts from them instead
        # of the priors (a restarted server, service/contention_memory.py)
        self.learned = dict(learned or {})
        self.ratios = dict(ratios or {})
        self.start_stream((), random.Random(0))

    def start_stream(self, workflows: Sequence[Workflow], rng: random.Random) -> None:
        self.learner = ContentionLearner()
        for unit, (s, p, runs) in self.learned.items():
            self.learner.restore(unit, s, p, runs)
        self.measured = MeasuredRatio()  # measured / predicted GPU runs: scales the next predictions
        for unit, log_ratio in self.ratios.items():
            self.measured.restore(unit, log_ratio)
        self.ends = InvocationEnds()  # the planner's predicted end of each task placed, per invocation
        self._pressure = TimeAverage(self.config.pressure_tau_ms)  # the learned GPU pressure running (_gpu)
        self._door = TimeAverage(self.config.door_tau_ms)  # invocations at the door (place, admit)
        self._held: dict[tuple[int, str], float] = {}  # tasks held, in hold order -> their GPU ms
        self._prefix: dict[tuple[int, str], float] | None = None  # GPU ms held before each (None: stale)
        self._held_total = 0.0
        self._held_since: dict[tuple[int, str], float] = {}  # when each held task was first held
        self._vram_wait: dict[tuple[int, str], float] = {}  # held tasks whose VRAM did not fit -> VRAM MB
        self._gpu_cache: tuple[tuple[int, float], list[_Gpu]] | None = None  # per live state

    # ---- the live GPU as the planner sees it --------------------------------------------------
    def _gpu(self, live: MachineSnapshot) -> list[_Gpu]:
        key = (live.version, live.now_ms)
        if self._gpu_cache is not None and self._gpu_cache[0] == key:
            return self._gpu_cache[1]
        out = self._gpu_now(live)
        self._gpu_cache = (key, out)
        self._pressure.sample(live.now_ms, sum(g.p for g in out if not g.loading))
        return out

    def _gpu_now(self, live: MachineSnapshot) -> list[_Gpu]:
        views: list[RunningView] = live.running(gpu=True)
        pressures = [self.learner.params(v.card) for v in views]
        total_p = sum(p for (_, p), v in zip(pressures, views, strict=True) if not v.loading)
        out = []
        for v, (s, p) in zip(views, pressures, strict=True):
            foreign = total_p - (0.0 if v.loading else p)
            out.append(
                _Gpu(_remaining_ms(v, s * foreign, self.config.late_fraction), v.vram_mb, s, p, v.loading, foreign)
            )
        return out

    def _run_beside(self, card: ToolCard, gpu: list[_Gpu]) -> tuple[float, float]:
        """(its contended run time, the delay it inflicts) if it starts now beside ``gpu``."""
        s, p = self.learner.params(card)
        iso = card.gpu_ms or card.cpu_ms
        run = iso
        # why the floor: the co-runners of now leave and others start during the run, so on average
        # a run meets the GPU's time-averaged pressure (x background_share) when that is more than
        # today's co-runners press: a sensitive task is not sent to the GPU on a quiet instant
        background = self.config.background_share * self._pressure.value
        for _ in range(2):  # fixed point: each co-runner presses for the part of the run it overlaps
            foreign = sum(g.p * min(1.0, g.remaining_ms / run) for g in gpu if not g.loading)
            run = iso * (1.0 + s * max(foreign, background))
        # the delay it inflicts on co-runner j over their overlap T: j's rate drops from
        # 1/(1+s_j P_j) to 1/(1+s_j (P_j+p)); the work it loses then takes 1+s_j P_j longer to
        # redo, so its end moves by T s_j p / (1 + s_j (P_j + p)) (a crowded GPU adds less per task)
        harm = sum(g.s * p * min(g.remaining_ms, run) / (1.0 + g.s * (g.foreign + p)) for g in gpu if not g.loading)
        return run * self.measured.factor(card), harm  # what its runs took, measured, over the model's word

    def _hold_ms(self, card: ToolCard, gpu: list[_Gpu], live: MachineSnapshot) -> tuple[float, float]:
        """(predicted finish, harm of its run) when waiting for the GPU: until enough VRAM frees (or
        the crowd thins)."""
        rest = sorted(gpu, key=lambda g: g.remaining_ms)
        wait, k = vram_free_ms(card.vram_needed_mb, rest, live.vram_in_use_mb, live.vram_budget_mb)
        if k == 0 and rest:  # VRAM fits: hold only to let the first co-runner finish
            wait, k = rest[0].remaining_ms, 1
        run, harm = self._run_beside(
            card, [_Gpu(g.remaining_ms - wait, g.vram_mb, g.s, g.p, g.loading, g.foreign) for g in rest[k:]]
        )
        return wait + run, harm

    # ---- decisions -----------------------------------------------------------------------------
    def place(self, inv: Invocation, task: str, live: MachineSnapshot) -> Mode | None:
        card = inv.cards[task]
        self._door.sample(live.now_ms, self._at_door(live))
        cpu_ms = cpu_wait_ms(live) + card.cpu_ms
        budget = live.vram_budget_mb
        if not card.has_gpu or (budget is not None and card.vram_needed_mb > budget):
            # no GPU code, or it never fits: any GPU placement would be an oom
            return self._placed(inv, task, live, Mode.CPU, cpu_ms)
        key = (inv.id, task)
        fits = live.fits_now(card.vram_needed_mb)
        since = self._held_since.get(key)
        # why the cap: a task that presses hard (its harm) would otherwise be held at every event
        # while the GPU stays busy, or sent to a slow CPU run, and starve: once held max_hold_factor x
        # its GPU time with its VRAM free, it is overdue and its harm no longer counts
        overdue = (
            since is not None and fits and live.now_ms - since >= self.config.max_hold_factor * (card.gpu_ms or 0.0)
        )
        gpu = self._gpu(live)
        cost = self._cost_of(inv, task, live, gpu)
        best_mode, best_ms, best = self._best_start(
            inv, card, gpu, live, cpu_ms, fits, 0.0 if overdue else self.config.harm_weight, cost
        )
        may_hold = not overdue and (key in self._held or len(self._held) < self.config.max_held)
        if gpu and may_hold and self._hold_cost(key, card, gpu, live, cost) < best:
            if key not in self._held:
                self._held[key] = card.gpu_ms or 0.0
                self._held_since[key] = live.now_ms
                self._prefix = None
            if fits:
                self._vram_wait.pop(key, None)
            else:
                self._vram_wait[key] = card.vram_needed_mb
            return None
        self._held_since.pop(key, None)
        self._vram_wait.pop(key, None)
        if self._held.pop(key, None) is not None:
            self._prefix = None
        return self._placed(inv, task, live, best_mode, best_ms)

    def _hold_cost(
        self, key: tuple[int, str], card: ToolCard, gpu: list[_Gpu], live: MachineSnapshot, cost: _Cost
    ) -> float:
        """The cost of holding, to be compared with the best start now's. Its predicted finish: the
        GPU work held before it, the wait, the run.

        * VRAM fits now: the hold only waits for a thinner crowd, a gain on a GPU run it could start
          now: it must be ``hold_margin`` cheaper than that start (the cost divided by it).
        * VRAM does not fit: the hold is the GPU's only route, against a CPU run. It is priced as
          the start it leads to: its finish stretched by 1 / ``vram_hold_margin`` (the least
          certain prediction), plus the harm of that later run. Why not the margin on the cost:
          when a sibling sets the invocation's end, every option costs about that end, and a margin
          on the cost would forbid any hold, sending the task to a CPU run however long (a full GPU
          then sends whole invocations to the CPU, one task after the other)."""
        finish, harm = self._hold_ms(card, gpu, live)
        finish += self._ahead_ms(key)
        if live.fits_now(card.vram_needed_mb):
            return cost(finish, 0.0) / self.config.hold_margin
        budget = live.vram_budget_mb
        share = 1.0 if budget is None else card.vram_needed_mb / budget
        door = door_harm_ms(self._run_beside(card, [])[0], self._door.value, share, self.config.door_harm_weight)
        return cost(finish / self.config.vram_hold_margin, self.config.harm_weight * harm + door)

    def _placed(self, inv: Invocation, task: str, live: MachineSnapshot, mode: Mode, finish_ms: float) -> Mode:
        if mode is Mode.GPU_NOW:  # finish_ms is its predicted run: compared with the run when it ends
            card = inv.cards[task]
            self.measured.started(inv.id, task, card, finish_ms / self.measured.factor(card))
        self.ends.placed(inv, task, live.now_ms + finish_ms)
        return mode

    def _cost_of(self, inv: Invocation, task: str, live: MachineSnapshot, gpu: list[_Gpu]) -> _Cost:
        """The cost of an option for ``task`` (``_Cost``)."""
        now = live.now_ms
        cpu_wait = cpu_wait_ms(live)
        others = (
            self.ends.others_end_ms(inv, task, now, lambda u: self._ready_finish_ms(inv.cards[u], gpu, live, cpu_wait))
            - now
        )
        return _Cost(self.ends.tail_ms(inv.workflow)[task], others, self.config.slack_tie)

    def _ready_finish_ms(self, card: ToolCard, gpu: list[_Gpu], live: MachineSnapshot, cpu_wait: float) -> float:
        """A ready task's best finish if it started now (a sibling not placed yet)."""
        best = cpu_wait + card.cpu_ms
        if not card.has_gpu or (live.vram_budget_mb is not None and card.vram_needed_mb > live.vram_budget_mb):
            return best
        if live.fits_now(card.vram_needed_mb):
            return min(best, self._run_beside(card, gpu)[0])
        # why: its VRAM does not fit now, but it may wait for the GPU rather than take the CPU (as
        # ``place`` decides without slack); counting only its CPU run would give every sibling slack
        # on a full GPU, and send whole invocations to long CPU runs one task after the other
        hold = self._hold_ms(card, gpu, live)[0] if gpu else math.inf
        return hold if hold < self.config.vram_hold_margin * best else best

    def _best_start(
        self,
        inv: Invocation,
        card: ToolCard,
        gpu: list[_Gpu],
        live: MachineSnapshot,
        cpu_ms: float,
        fits: bool,
        harm_weight: float,
        cost: _Cost,
    ) -> tuple[Mode, float, float]:
        """The cheapest start now: (mode, its predicted finish, its cost)."""
        # why only with slack: without it the CPU run's length already sets the invocation's end, and
        # its harm would push a task whose GPU runs vary 20x (image_resize, sensitivity 5.4) onto the GPU.
        # But always while invocations wait at the door: a hold for VRAM is then charged the door's delay
        # (door_harm_ms), so the CPU run that replaces it is charged its queue's, or a crowded door
        # would send every hold to a saturated CPU (bursty streams under a superlinear law)
        cpu_harm = (
            cpu_harm_ms(card, live, self.config.cpu_harm_weight)
            if cost.has_slack(cpu_ms) or self._at_door(live)
            else 0.0
        )
        best_mode, best_ms, best = Mode.CPU, cpu_ms, cost(cpu_ms, cpu_harm)
        if fits:
            run, harm = self._run_beside(card, gpu)
            c = cost(run, harm_weight * harm)
            if c < best:
                best_mode, best_ms, best = Mode.GPU_NOW, run, c
        if Mode.GPU_QUEUE in inv.workflow.decision_space.modes:
            q, harm = self._queue_ms(card, gpu, live)
            # its VRAM does not fit now: a wait for VRAM, as uncertain as a hold's (vram_hold_margin)
            c = cost(q if fits else q / self.config.vram_hold_margin, harm_weight * harm)
            if c < best:
                best_mode, best_ms, best = Mode.GPU_QUEUE, q, c
        return best_mode, best_ms, best

    def _ahead_ms(self, key: tuple[int, str]) -> float:
        """GPU work of the tasks held before ``key`` (all held ones for a new task): they get the GPU
        first. Prefix sums rebuilt only when the held set changes."""
        if self._prefix is None:
            self._prefix, total = {}, 0.0
            for k, ms in self._held.items():
                self._prefix[k] = total
                total += ms
            self._held_total = total
        return self._prefix.get(key, self._held_total)

    def _queue_ms(self, card: ToolCard, gpu: list[_Gpu], live: MachineSnapshot) -> tuple[float, float]:
        """(its predicted finish through the GPU queue, the delay its run inflicts). The queue admits
        its head only once the head's VRAM fits, so it starts no sooner than the running GPU tasks free
        the most VRAM that it or a task queued before it needs. Why: priced by the queue's backlog
        alone, a 6.4 GB llama_3b (768 ms) would go to the queue as if it would start at once, then
        wait there for tens of seconds while ``gpu_now`` starts keep the VRAM full (on bursty streams
        at high load, the tail invocations are those that hold such a wait)."""
        backlog = sum(g.remaining_ms for g in gpu if g.loading)
        backlog += live.queue_backlog_ms
        need = max([card.vram_needed_mb] + [c.vram_needed_mb for c in live.queued_cards()])
        rest = sorted(gpu, key=lambda g: g.remaining_ms)
        backlog = max(backlog, vram_free_ms(need, rest, live.vram_in_use_mb, live.vram_budget_mb)[0])
        run, harm = self._run_beside(card, gpu)
        return backlog + card.load_needed_ms + run, harm

    def _at_door(self, live: MachineSnapshot) -> int:
        """Invocations waiting at this planner's door (none without admission: the simulator may
        show arrivals of the same instant there for a moment)."""
        return live.admission_waiting if self.admission else 0

    def admit(self, inv: Invocation, live: MachineSnapshot) -> bool:
        if not self.admission:
            return True
        self._door.sample(live.now_ms, self._at_door(live))
        # why: under a law superlinear in the crowd, admitting while tasks wait for VRAM adds GPU work
        # to a full GPU with every new invocation, and throughput collapses at high load
        # ... but not for a wait that one running task's end ends (``waits_for_one_run``): new
        # invocations do not prolong it, and shutting the door for it would make every invocation wait
        # behind a model of which one copy fits at a time (docs/results/load-tuning.md)
        if self._vram_wait:
            biggest_mb = max((g.vram_mb for g in live.running(gpu=True)), default=0.0)
            if any(
                not live.fits_now(mb)
                and not waits_for_one_run(mb, biggest_mb, live.vram_in_use_mb, live.vram_budget_mb)
                for mb in self._vram_wait.values()
            ):
                return False
        if live.cpu_busy < live.cpu_slots or live.cpu_waiting == 0:
            return True
        gpu = self._gpu(live)
        pressure = sum(g.p for g in gpu if not g.loading)
        typical_s = sum(g.s for g in gpu) / len(gpu) if gpu else 0.0
        return 1.0 + typical_s * pressure < self.config.admit_slowdown

    def ended(self, inv: Invocation) -> None:
        """Its tasks held for the GPU are forgotten (an invocation that failed leaves them behind:
        they would count ahead of every later hold), and so are its runs that never ended."""
        if inv.left > 0:
            self.measured.forget(inv.id)
        gone = [k for k in self._held if k[0] == inv.id]
        for key in gone:
            del self._held[key]
            self._held_since.pop(key, None)
            self._vram_wait.pop(key, None)
        if gone:
            self._prefix = None

    def observe(self, done: TaskDone) -> None:
        self.learner.observe(done.card, done.mode, done.run_ms, dict(done.overlap_ms))
        self.measured.observe(done.invocation, done.task, done.mode, done.run_ms)
