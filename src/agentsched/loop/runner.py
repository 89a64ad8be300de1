"""The closed scheduling loop: propose -> execute R times -> median -> observe, for N rounds.

Every execution is counted, including the probes a policy (its monitor) asks for, so exploration
cost is visible in ``executions_total`` and in the regret.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsched.errors import AgentschedError, MappingError, PolicyError, TestbedError
from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import mapping_key, validate_mapping
from agentsched.model.rounds import first_cause, speaks
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult, brute_force
from agentsched.policies.base import MappingT, Policy, PolicyContext, RoundResult
from agentsched.testbeds.base import Testbed


@dataclass
class RoundRecord:
    """A round plus what the policy said about it.

    Its executions (the round's runs and the probes) are kept slim (``slim_execution``): the policy
    observed their per-task timelines, the record keeps their figures only."""

    result: RoundResult  # the measured round
    # probe executions the policy ran for this round: while proposing it (before its runs; for
    # round 0 also during reset) and while observing it (after its runs)
    probes: tuple[Execution, ...]
    proposal_info: dict[str, Any]  # what the policy recorded with its proposal (prompts, reasons)
    evidence: dict[str, Any] | None  # what observe() returned (monitor evidence)
    executions_after: int = 0  # executions so far once the round is observed (its probes included)


ENDLESS_KEEP_ROUNDS = 64  # rounds an endless run keeps (what reports and `history` read); the store keeps all


@dataclass
class LoopRun:
    """A whole run of one policy on one workflow.

    ``records`` holds every round of a finite run; an endless one (``rounds=None``) keeps the last
    ``keep_rounds`` only, so a server's memory stays flat. The totals and the best round are
    counted as rounds arrive, so they cover the whole run either way."""

    workflow: Workflow  # what ran
    policy: str  # policy label
    online: bool  # False for offline references
    seed: int  # seed of the noise and policy generators
    repeats: int  # executions per round
    keep_rounds: int | None = None  # None: keep every round's record
    records: list[RoundRecord] = field(default_factory=list)  # one per round kept, in order
    probes_total: int = 0  # every probe of the run, also of rounds no longer kept
    rounds_total: int = 0  # every round of the run
    _best: RoundResult | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # a run rebuilt from its records (a journal) counts them like a live one; the counts given
        # with them are recomputed, so they always agree with the records
        given, self.records = list(self.records), []
        self.probes_total, self.rounds_total, self._best = 0, 0, None
        for record in given:
            self.add(record)

    def add(self, record: RoundRecord) -> None:
        """Keep one observed round (dropping the oldest past ``keep_rounds``) and count it."""
        self.records.append(record)
        if self.keep_rounds is not None and len(self.records) > self.keep_rounds:
            del self.records[0]
        self.rounds_total += 1
        self.probes_total += len(record.probes)
        r = record.result
        if r.e2e_ms is not None and (self._best is None or r.e2e_ms < self._best.e2e_ms):  # type: ignore[operator]
            self._best = r

    @property
    def rounds(self) -> list[RoundResult]:
        return [r.result for r in self.records]

    @property
    def executions_total(self) -> int:
        """Every execution of the run: round runs and probes."""
        return self.records[-1].executions_after if self.records else 0

    def all_executions(self) -> list[Execution]:
        """Every execution of the kept rounds, round runs and probes (each round's runs, then its probes)."""
        out: list[Execution] = []
        for r in self.records:
            out.extend(r.result.executions)
            out.extend(r.probes)
        return out

    def best_round(self) -> RoundResult | None:
        """The round with the lowest E2E of the whole run (the first of equals)."""
        return self._best


def _lean(x: Execution) -> Execution:
    """``x`` without the tools' outputs: the loop and its policies read timelines and figures only;
    outputs go to the caller (the runtime hands them over before the loop sees the execution) and
    are never kept in records (a long run would hold every output of every invocation)."""
    return dataclasses.replace(x, outputs={}) if x.outputs else x


def slim_execution(x: Execution, mapping: MappingT | None = None) -> Execution:
    """``x`` as a round record keeps it once the policy has observed it: status, mapping, E2E,
    elapsed time, peak VRAM, message and extra (what metrics, reports, journals and ``history`` read),
    without the per-task spans and the VRAM curve. Why: on a 10,000-task workflow those are 10,000
    spans per execution, and a 20-round run kept over a million of them (most of its memory).
    ``mapping``: the round's mapping, shared by its runs instead of a copy each when equal."""
    shared = mapping if mapping is not None and x.mapping == mapping else x.mapping
    if not x.spans and not x.vram_timeline and shared is x.mapping:
        return x
    return dataclasses.replace(x, spans=(), vram_timeline=(), mapping=shared)


def summarize_runs(
    workflow: Workflow,
    mapping: MappingT,
    execs: list[Execution],
    round_index: int,
    executions_total: int,
    previous: RoundResult | None = None,
) -> RoundResult:
    """Fold R executions of one mapping into a round: infeasible if a run that tells of the mapping
    failed (``model.rounds.speaks``: an oom; a placed task that raised, unless at least as many runs
    ended well), else the median E2E of the runs that ended; the other failed runs are left out (a
    failure in host code; a bad input that broke a placed tool). When every run failed in host
    code, the round has nothing to judge its mapping by (``RoundResult.judged`` False): it keeps the
    first run's status, and its message says so; unless the ``previous`` round ran the same mapping
    with nothing to judge either: then it fails it (``RoundResult.judged_again``). The loop passes
    no ``previous`` where the failure cannot be the mapping's (``_HostFailures``)."""
    judged = [x for x in execs if speaks(x, execs)]
    elapsed = statistics.median(x.elapsed_ms for x in execs)
    peak = max(x.peak_vram_mb for x in execs)
    if not judged:
        first = execs[0]
        again = (
            previous is not None
            and not previous.judged
            and mapping_key(workflow, previous.mapping) == mapping_key(workflow, mapping)
        )
        why = "again, judged a failure of the mapping" if again else "nothing to judge"
        return RoundResult(
            round_index,
            mapping,
            first.status,
            None,
            elapsed,
            peak,
            tuple(execs),
            executions_total,
            f"{why}: every run failed in host code ({first.message})",
            judged_again=again,
        )
    bad = first_cause(execs)
    if bad is not None:
        return RoundResult(
            round_index, mapping, bad.status, None, elapsed, peak, tuple(execs), executions_total, bad.message
        )
    e2e = statistics.median(x.e2e_ms for x in judged)  # type: ignore[misc]
    return RoundResult(round_index, mapping, Status.OK, e2e, elapsed, peak, tuple(execs), executions_total)


class _HostFailures:
    """What says a failure in host code is not the mapping's: the testbed says so of every such run
    (``extra["external"]``: a service outside failed, or the node ran before any placed task had
    started), the mapping ran well before (its host code took what its tools returned), or the same
    failure (node and message: an LLM endpoint down) came under another mapping too. Such a round
    has nothing to judge however long it lasts; otherwise its mapping's second one in a row is
    judged (``summarize_runs``)."""

    def __init__(self) -> None:
        self.worked: set[str] = set()  # mapping keys a run ended well under
        self.seen: dict[tuple[str, str], set[str]] = {}  # (failed node, message) -> mapping keys

    @staticmethod
    def _failures(execs: list[Execution]) -> set[tuple[str, str]]:
        # numbers masked: the same failure of two requests may name their ids, times or ports
        return {
            (str(x.extra["failed_node"]), re.sub(r"\d+", "#", x.message))
            for x in execs
            if not x.ok and not x.placement_failed
        }

    def previous(self, key: str, execs: list[Execution], previous: RoundResult | None) -> RoundResult | None:
        """The round ``summarize_runs`` may judge this one again by (None: never)."""
        elsewhere = any(self.seen.get(f, set()) - {key} for f in self._failures(execs))
        host = [x for x in execs if not x.ok and not x.placement_failed]
        external = bool(host) and all(x.extra.get("external") for x in host)
        return None if key in self.worked or elsewhere or external else previous

    def add(self, key: str, execs: list[Execution]) -> None:
        if any(x.ok for x in execs):
            self.worked.add(key)
        for f in self._failures(execs):
            self.seen.setdefault(f, set()).add(key)


def noise_stream(seed: int) -> random.Random:
    """The testbed-noise generator of ``--seed S``. One meaning of a seed everywhere: S derives two
    independent streams, the testbed's noise ("noise:S") and the policy's choices ("policy:S"), so a
    policy's randomness can never shift the noise another policy sees; ``--seeds N`` runs S = 0..N-1."""
    return random.Random(f"noise:{seed}")


def noise_at(seed: int, place: int) -> random.Random:
    """The testbed-noise generator of execution ``place`` of a runtime's history under ``seed``: the
    same for that place in any process, whatever was replayed before it."""
    return random.Random(f"noise:{seed}:{place}")


def policy_stream(seed: int) -> random.Random:
    """The policy generator of ``--seed S`` (see ``noise_stream``)."""
    return random.Random(f"policy:{seed}")


def run_loop(
    workflow: Workflow,
    policy: Policy,
    testbed: Testbed,
    *,
    rounds: int | None = 20,
    repeats: int = 5,
    seed: int = 0,
    on_round: Callable[[RoundRecord], None] | None = None,
    probe_allowed: Callable[[], bool] | None = None,
    keep_rounds: int | None = None,
) -> LoopRun:
    """Run ``policy`` for ``rounds`` rounds of ``repeats`` executions each on ``testbed`` (``rounds``
    None: until the caller stops it, e.g. a runtime's ``on_round`` raising; the policy then sees no
    last round).

    The testbed's noise and the policy's randomness draw from two generators seeded from ``seed``,
    so runs are reproducible and policies cannot perturb each other's noise stream.
    ``probe_allowed`` (optional) is asked before each probe a policy's monitor wants to run.
    ``keep_rounds``: how many round records the returned run keeps (default: all of a finite run,
    the last ``ENDLESS_KEEP_ROUNDS`` of an endless one). Executions reach policies and records
    without the tools' outputs.
    """
    if rounds is not None and rounds < 1:
        raise AgentschedError(f"rounds must be >= 1, got {rounds}")
    if repeats < 1:
        raise AgentschedError(f"repeats must be >= 1, got {repeats}")
    noise_rng = noise_stream(seed)
    policy_rng = policy_stream(seed)
    counter = {"n": 0}
    pending_probes: list[Execution] = []

    def probe(mapping: MappingT) -> Execution:
        m = validate_mapping(workflow, mapping)
        x = _lean(testbed.run(workflow, m, rng=noise_rng))
        counter["n"] += 1
        pending_probes.append(x)
        return x

    ctx = PolicyContext(
        workflow=workflow,
        cards=dict(workflow.task_cards),
        rng=policy_rng,
        probe=probe,
        rounds=rounds,
        repeats=repeats,
        probe_allowed=probe_allowed,
    )
    testbed.begin_round(0)  # round 0 begins with the policy's reset: its probes belong to it
    policy.reset(ctx)
    if keep_rounds is None and rounds is None:
        keep_rounds = ENDLESS_KEEP_ROUNDS
    run = LoopRun(workflow, policy.label, policy.online, seed, repeats, keep_rounds)
    result: RoundResult | None = None  # the previous round's
    host = _HostFailures()
    for i in range(rounds) if rounds is not None else itertools.count():
        if i > 0:
            testbed.begin_round(i)  # before the round's probes (propose) and runs
        proposal = policy.propose(i)
        try:
            mapping: dict[str, Mode] = validate_mapping(workflow, proposal.mapping)
        except MappingError as e:
            raise PolicyError(f"policy {policy.label} proposed an invalid mapping in round {i}: {e}") from None
        execs = [_lean(testbed.run(workflow, mapping, rng=noise_rng)) for _ in range(repeats)]
        counter["n"] += len(execs)
        key = mapping_key(workflow, mapping)
        result = summarize_runs(workflow, mapping, execs, i, counter["n"], host.previous(key, execs, result))
        host.add(key, execs)
        evidence = policy.observe(result)
        # probes from reset/propose (before the runs) and from observe (after) all belong here;
        # the policy has seen the timelines: the record keeps the figures (slim_execution)
        slim = dataclasses.replace(result, executions=tuple(slim_execution(x, mapping) for x in execs))
        record = RoundRecord(
            slim, tuple(slim_execution(x) for x in pending_probes), dict(proposal.info), evidence, counter["n"]
        )
        pending_probes.clear()
        run.add(record)
        if on_round is not None:
            on_round(record)
    return run


def reference_oracle(
    workflow: Workflow, testbed: Testbed, *, repeats: int = 5, cache: dict[tuple[str, str], OracleResult] | None = None
) -> OracleResult:
    """The oracle the metrics compare against: exhaustive search over the testbed's noise-free
    ``expected`` executions when it has them (the simulator: one exact run per mapping), else on
    the testbed itself with ``repeats`` runs per mapping (the paper's "same environment"). Cached per workflow and
    card set in ``cache`` when given. Raises a one-line ``AgentschedError`` ("no oracle for NAME: ...")
    when the workflow is too large to enumerate or has no feasible mapping; a ``TestbedError`` (the
    testbed cannot run a mapping at all, e.g. a GPU placement without CUDA) passes through as is."""
    key = (workflow.name, workflow.card_set.name)
    if cache is not None and key in cache:
        return cache[key]
    try:  # brute_force takes the testbed's expected() execution where it has one (the simulator)
        res = brute_force(workflow, testbed, repeats=repeats, rng=random.Random(f"oracle:{workflow.name}"))
    except TestbedError:
        raise
    except (AgentschedError, ValueError) as e:
        raise AgentschedError(f"no oracle for {workflow.name}: {e}") from None
    if not res.feasible:
        raise AgentschedError(f"no oracle for {workflow.name}: no feasible mapping")
    if cache is not None:
        cache[key] = res
    return res
