"""The benchmark harness: scenarios x policies x seeds through the closed loop on a testbed (the
simulator by default, or ``local``/``ray``: the real tools), metrics against the brute-force
oracle; ``experiments/results.py`` writes results.json and the report renders it.

It drives only the public API: ``resolve_workflow``, ``make_policy``, a ``TestbedSpec``,
``run_loop``, ``reference_oracle`` and the metrics. The oracle is computed once per workflow (on the
noise-free simulator; on a testbed without a noise-free version, by exhaustive search there with
``repeats`` runs per mapping, median) and handed to the ``oracle`` reference policy; online policies
never see it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentsched.errors import AgentschedError, PolicyError
from agentsched.experiments.bench_records import BenchConfig, BenchRecord, BenchResult
from agentsched.experiments.harness import run_scored, scoring_view
from agentsched.experiments.journal import RunJournal
from agentsched.loop.metrics import OracleView
from agentsched.loop.registry import get_spec, make_policy
from agentsched.loop.runner import LoopRun
from agentsched.model.execution import Execution
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult
from agentsched.policies.base import Policy
from agentsched.scenarios import resolve_workflow, resolve_workflow_and_world
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import TestbedSpec
from agentsched.testbeds.world import choose_world, load_world


def ablation_workflow(cards: str | None) -> tuple[Workflow | None, str | None]:
    """The S13 workflow of the bench's ablation under ``cards``, or (None, why it cannot run)."""
    try:
        wf = resolve_workflow("S13")
        return (wf.with_cards(cards) if cards else wf), None
    except AgentschedError as e:
        return None, f"the S13 ablation skipped: S13 does not resolve under --cards {cards} ({e})"


def policy_limits(
    policies: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    workflows: Mapping[str, Workflow],
    *,
    preflight: bool = False,
) -> dict[tuple[str, str], str]:
    """(workflow name, policy) -> why that policy cannot take that workflow on (``Policy.check_workflow``:
    more mappings than ucb1's arm cap, more tasks than agent-plan's). No I/O unless ``preflight``: then
    each policy's whole preflight (an LLM endpoint's one request) also runs on the workflows it can take
    on, and its error is raised. The oracle is built per scenario from its search: never limited here."""
    limits: dict[tuple[str, str], str] = {}
    for pol in policies:
        if pol == "oracle":
            continue
        probe = make_policy(pol, **options.get(pol, {}))
        try:
            for name, wf in workflows.items():
                try:
                    probe.check_workflow(wf)
                except PolicyError as e:
                    limits[(name, pol)] = str(e)
                    continue
                if preflight:
                    probe.preflight(wf)
        finally:
            probe.close()
    return limits


def runnable_workflows(
    policies: Sequence[str], workflows: Mapping[str, Workflow], limits: Mapping[tuple[str, str], str]
) -> dict[str, Workflow]:
    """The workflows some chosen policy can run (``limits``: ``policy_limits``'s); a one-line
    ``PolicyError`` when there is none, naming each policy's first limit."""
    kept = {n: wf for n, wf in workflows.items() if any((n, p) not in limits for p in policies)}
    if not kept:
        why: dict[str, str] = {}  # policy -> its first limit
        for (_, pol), reason in limits.items():
            why.setdefault(pol, reason)
        raise PolicyError(
            f"no chosen policy ({', '.join(policies)}) can run any benched workflow: {'; '.join(why.values())}"
        )
    return kept


def run_bench(
    config: BenchConfig,
    *,
    progress: Callable[[str], None] | None = None,
    testbed: Testbed | None = None,
    journal: RunJournal | None = None,
) -> BenchResult:
    """Run every (scenario, policy, seed); ``progress(label)`` is called after each run.

    A policy that cannot take a workflow on (``policy_limits``) is skipped on that workflow, with a
    note, before any oracle is computed; a workflow no chosen policy can run gets no oracle either.

    ``journal``: record each finished run there as it completes, and take the runs it already holds
    instead of running them again (``--resume``); the results equal an uninterrupted run's.

    ``testbed``: the testbed to run on (the caller closes it); None builds the one ``config.testbed``
    names and closes it at the end."""
    for p in config.policies:
        get_spec(p)  # unknown names fail before any work
    workflows, worlds = _workflows(config)
    if config.testbed is None:  # the simulator in the workflows' world, chosen and loaded once
        config = replace(config, testbed=TestbedSpec(world=load_world(choose_world(None, worlds))))
    ablation_wf, ablation_note = ablation_workflow(config.cards) if config.ablation else (None, None)
    # before the oracles: a workflow too large for a policy costs that policy's runs there, not the bench
    limits = policy_limits(config.policies, config.policy_options, workflows)
    kept = runnable_workflows(config.policies, workflows, limits)
    notes = [f"{pol} skipped on {name}: {why}" for (name, pol), why in limits.items()]
    t0 = time.perf_counter()
    tb = testbed if testbed is not None else config.spec.build()
    try:
        cache: dict[tuple[str, str], OracleResult] = {}
        scored = {name: _reference(wf, tb, config, cache, notes) for name, wf in kept.items()}
        oracles = {name: res for name, (res, _) in scored.items()}
        views = {name: view for name, (_, view) in scored.items()}
        records, policy_info = _run_all(config, workflows, oracles, views, tb, journal, progress, notes, limits)
        notes.extend(fallback_notes(records))
        gantt = gantt_timelines(
            kept.get(config.gantt_scenario), views.get(config.gantt_scenario), tb, config.spec.cpu_slots
        )
        chosen = {
            (r.scenario, r.policy, r.seed): chosen_e2e_ms(workflows[r.scenario], r.run, tb, views[r.scenario])
            for r in records
        }
        heft = None
        if any(p in ("heft", "heft-cf") for p in config.policies):
            from agentsched.experiments.heft_study import heft_study

            heft = heft_study(kept, views, cpu_cores=config.spec.cpu_slots, cards=config.cards)
    finally:
        if testbed is None:
            tb.close()
    ablation = None
    if ablation_note is not None:
        notes.append(ablation_note)
    elif ablation_wf is not None:
        ablation = _run_ablation(config, notes, ablation_wf, journal, worlds)
    return BenchResult(
        config,
        kept,
        oracles,
        views,
        records,
        notes,
        ablation,
        wall_s=time.perf_counter() - t0,
        gantt=gantt,
        policy_info=policy_info,
        chosen_e2e_ms=chosen,
        heft_study=heft,
        skipped=dict(limits),
    )


def _workflows(config: BenchConfig) -> tuple[dict[str, Workflow], list[str | None]]:
    """The benched workflows by name (under ``config.cards``), and what each file's world: key names."""
    workflows: dict[str, Workflow] = {}
    worlds: list[str | None] = []
    for sc in config.scenarios:
        wf, world = resolve_workflow_and_world(sc)
        worlds.append(world)
        if wf.name in workflows:  # one would silently replace the other
            raise AgentschedError(f"two scenarios are named {wf.name} ({', '.join(_named(config.scenarios, wf.name))})")
        workflows[wf.name] = wf.with_cards(config.cards) if config.cards else wf
    return workflows, worlds


def _run_all(
    config: BenchConfig,
    workflows: dict[str, Workflow],
    oracles: dict[str, OracleResult],
    views: dict[str, OracleView],
    tb: Testbed,
    journal: RunJournal | None,
    progress: Callable[[str], None] | None,
    notes: list[str],
    limits: Mapping[tuple[str, str], str],
) -> tuple[list[BenchRecord], dict[str, dict[str, Any]]]:
    """Every (scenario, policy, seed) run but the ``limits`` ones, and each policy's settings
    (``Policy.describe``)."""
    records: list[BenchRecord] = []
    # one policy object per policy name for the whole bench (reset() starts each run), so state a
    # policy keeps across runs does its job: an LLM endpoint that failed for good in one run (its
    # circuit open) is not called again in later runs, instead of each paying breaker_rounds x timeout
    policies: dict[str, Policy] = {}
    down_noted: set[str] = set()
    try:
        for name, wf in workflows.items():
            for pol in config.policies:
                opts = dict(config.policy_options.get(pol, {}))
                for seed in config.seeds:
                    if (name, pol) in limits:  # counted, so the progress reaches its total
                        if progress is not None:
                            progress(f"{name} {pol} seed {seed} (skipped)")
                        continue
                    key = f"bench|{name}|{pol}|{seed}"
                    done = journal.get(key, BenchRecord, {name: wf}) if journal is not None else None
                    if done is not None:  # --resume: this run finished before the interruption
                        journal.resumed += 1
                        records.append(done)
                        if progress is not None:
                            progress(f"{name} {pol} seed {seed} (resumed)")
                        continue
                    if pol == "oracle":  # the reference line reuses the search: its option is per scenario
                        policy = make_policy(pol, **{"oracle": oracles[name], **opts})
                    else:
                        if pol not in policies:
                            policies[pol] = make_policy(pol, **opts)
                        policy = policies[pol]
                    sr = run_scored(
                        wf, policy, tb, views[name], rounds=config.rounds, repeats=config.repeats, seed=seed
                    )
                    down = _circuit_opened(sr.run)
                    if down is not None and pol not in down_noted:
                        down_noted.add(pol)
                        notes.append(
                            f"{pol}: the LLM endpoint failed in {name} seed {seed} "
                            f"({down}); every later {pol} run fell back without calling it"
                        )
                    records.append(BenchRecord(name, pol, policy.online, seed, sr.run, sr.metrics))
                    if journal is not None:
                        journal.put(key, records[-1])
                    if progress is not None:
                        progress(f"{name} {pol} seed {seed}")
        for pol in config.policies:  # settings of every policy, also one whose runs were all resumed
            if pol != "oracle" and pol not in policies:
                policies[pol] = make_policy(pol, **config.policy_options.get(pol, {}))
        return records, {pol: p.describe() for pol, p in policies.items()}
    finally:
        for policy in policies.values():
            policy.close()


def chosen_e2e_ms(wf: Workflow, run: LoopRun, testbed: Testbed, view: OracleView) -> float | None:
    """Noise-free E2E of the mapping ``run`` chose (its best round's): the testbed's ``expected``
    execution, or the scoring oracle's reference where the testbed has no noise-free model. Compared
    with the noise-free oracle, unlike the best round's noisy measurement (which can 'beat' it)."""
    best = run.best_round()
    if best is None:
        return None
    ex = testbed.expected(wf, best.mapping)
    if ex is None:
        return view.reference(best.mapping)
    return ex.e2e_ms


def gantt_timelines(
    wf: Workflow | None, view: OracleView | None, testbed: Testbed, cpu_slots: int | None
) -> tuple[tuple[str, Execution], ...]:
    """Noise-free timelines of the all-GPU mapping and the oracle's (the testbed's own expected runs,
    else the noise-free simulator's on the same cards); empty when the scenario did not run."""
    if wf is None or view is None:
        return ()
    from agentsched.testbeds.sim import SimTestbed

    cards = wf.task_cards
    all_gpu = {t: Mode.GPU_NOW if cards[t].has_gpu else Mode.CPU for t in wf.task_ids}
    best = dict(view.best)
    model = (
        testbed
        if testbed.expected(wf, best) is not None
        else SimTestbed(noise_sigma=0.0, seed=None, cpu_slots=cpu_slots)
    )
    return tuple((label, model.expected(wf, m)) for label, m in (("all-GPU", all_gpu), ("oracle", best)))


def _reference(
    wf: Workflow, tb: Testbed, config: BenchConfig, cache: dict, notes: list[str]
) -> tuple[OracleResult, OracleView]:
    """The oracle, or for a workflow too large to enumerate the best known mapping (a long local search
    on the noise-free testbed): every ratio of that workflow is then E2E over the best known."""
    from agentsched.oracle import MAX_ORACLE_MAPPINGS

    size = len(wf.decision_space.modes) ** len(wf.tasks)
    if size <= MAX_ORACLE_MAPPINGS:
        return scoring_view(wf, tb, repeats=config.repeats, cache=cache)
    from agentsched.loop.best_known import best_known, noise_free_e2e
    from agentsched.model.execution import Status
    from agentsched.oracle import OracleEntry

    ref = best_known(wf, tb)
    x = tb.expected(wf, ref.mapping)
    assert x is not None  # best_known raised already on a testbed without a noise-free execution
    res = OracleResult(wf.name, (OracleEntry(ref.mapping, Status.OK, ref.e2e_ms, x.peak_vram_mb, x),), ref.evaluations)
    notes.append(
        f"{wf.name}: no oracle ({size:.3g} mappings); its ratios are over the best known mapping "
        f"({ref.e2e_ms:.0f} ms, {ref.source}, {ref.evaluations} noise-free runs)"
    )

    class _Lazy(dict):
        def __missing__(self, key: tuple) -> float | None:
            self[key] = noise_free_e2e(wf, tb, dict(zip(wf.task_ids, key, strict=True)))
            return self[key]

    lazy = _Lazy({tuple(ref.mapping[t] for t in wf.task_ids): ref.e2e_ms})
    view = OracleView(
        workflow=wf.name,
        task_ids=tuple(wf.task_ids),
        e2e_ms=ref.e2e_ms,
        best=dict(ref.mapping),
        best_mappings=(dict(ref.mapping),),
        equivalent_mappings=(dict(ref.mapping),),
        reference_e2e_ms=lazy,
        mappings_total=size,
        feasible_total=1,
    )
    return res, view


def _named(scenarios: Sequence[str], name: str) -> list[str]:
    """The --scenarios entries whose workflow is named ``name``."""
    out = []
    for sc in scenarios:
        try:
            if resolve_workflow(sc).name == name:
                out.append(sc)
        except AgentschedError:
            pass
    return out


def _run_ablation(
    config: BenchConfig, notes: list[str], wf: Workflow, journal: RunJournal | None, worlds: list[str | None]
) -> Any:
    try:
        from agentsched.experiments.ablation import run_ablation
    except ImportError as e:
        notes.append(f"ablation skipped: cannot import agentsched.experiments.ablation ({e})")
        return None
    spec = config.spec
    if not spec.simulated:  # the ablation's variants run on the simulator, in the workflows' world
        notes.append(f"the S13 ablation ran on the simulated testbed, not on {spec.kind.value}")
        spec = TestbedSpec(world=load_world(choose_world(None, worlds)))
    start = config.policy_options.get("agent-rules", {}).get("start", "warm")  # bench --start reaches it too
    return run_ablation(
        wf,
        rounds=config.rounds,
        repeats=config.repeats,
        seeds=list(config.seeds),
        start=start,
        paper=True,
        journal=journal,
        testbed=spec,
    )  # the built-in S13 (under --cards) by construction


# ---- helpers -------------------------------------------------------------------------------------


def fallback_notes(records: Sequence[BenchRecord]) -> list[str]:
    """One note per policy some of whose rounds its fallback reasoner decided (an LLM that answered
    garbage), so that its bench row does not read as the LLM's own results."""
    rounds: dict[str, list[int]] = {}
    for r in records:
        counts = rounds.setdefault(r.policy, [0, 0])
        counts[0] += sum(bool(rec.proposal_info.get("fallback")) for rec in r.run.records)
        counts[1] += len(r.run.records)
    return [
        f"{pol}: {k} of {n} rounds were decided by its fallback reasoner (the LLM's answer was unusable or "
        "its endpoint down: each round's `fallback` in results.json says why)"
        for pol, (k, n) in rounds.items()
        if k
    ]


def _circuit_opened(run: LoopRun) -> str | None:
    """Why an LLM reasoner's circuit opened in this run (its audit says so), or None."""
    for rec in run.records:
        why = rec.proposal_info.get("circuit_open")
        if why:
            return str(why)
    return None
