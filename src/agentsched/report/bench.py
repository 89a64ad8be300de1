"""The benchmark harness: scenarios x policies x seeds through the closed loop on a testbed (the
simulator by default, or ``local``: the real tools on this machine), metrics against the brute-force
oracle, and the outputs (results.json, report.md, PNGs).

It drives only the public API: ``resolve_workflow``, ``make_policy``, ``make_testbed``,
``run_loop``, ``reference_oracle`` and the metrics. The oracle is computed once per workflow (on the
noise-free simulator; on a testbed without a noise-free version, by exhaustive search there with
``repeats`` runs per mapping, median) and handed to the ``oracle`` reference policy; online policies
never see it.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from agentsched.data import paper_tables
from agentsched.errors import AgentschedError
from agentsched.loop.metrics import EQUIVALENCE_TOLERANCE, OracleView, RunMetrics, oracle_view, run_metrics
from agentsched.loop.runner import LoopRun, reference_oracle, run_loop
from agentsched.model.workflow import Mode, Workflow
from agentsched.oracle import OracleResult
from agentsched.policies.registry import get_spec, make_policy
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.factory import make_testbed

SCHEMA_VERSION = 1
DEFAULT_GANTT_SCENARIO = "S5"  # the paper's Table 2 contention example


@dataclass(frozen=True)
class BenchConfig:
    """What to run."""

    scenarios: tuple[str, ...]  # built-in scenario names or workflow files
    policies: tuple[str, ...]  # registry names
    rounds: int = 20  # rounds per run
    repeats: int = 5  # executions per round (median)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # one run per seed
    testbed: str = "sim"  # "sim" (simulator) or "local" (the real tools on this machine)
    noise_sigma: float = 0.03  # simulator noise (log-normal sigma per task); unused by local
    size: str = "small"  # local testbed tool size (small or paper); unused by sim
    cpu_slots: int | None = None  # sim: CPU cap (None: many-core host); local: CPU workers (None: cores)
    cards: str | None = None  # rebind every workflow to this card set (name or file)
    policy_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # policy -> make_policy kwargs
    ablation: bool = False  # run the agent's S13 ablation too
    gantt_scenario: str = DEFAULT_GANTT_SCENARIO  # scenario of the all-GPU vs oracle Gantt chart

    @property
    def simulated(self) -> bool:
        return self.testbed == "sim"

    def testbed_dict(self) -> dict[str, Any]:
        """results.json ``config.testbed``: the fields that do not apply to the testbed are null."""
        return {"name": self.testbed, "noise_sigma": self.noise_sigma if self.simulated else None,
                "size": None if self.simulated else self.size, "cpu_slots": self.cpu_slots}

    def make_testbed(self) -> Testbed:
        """The testbed this config names (seed 0: each run's noise is seeded by run_loop)."""
        if self.simulated:
            return make_testbed("sim", noise_sigma=self.noise_sigma, seed=0, cpu_slots=self.cpu_slots)
        opts: dict[str, Any] = {"size": self.size}
        if self.cpu_slots is not None:
            opts["cpu_workers"] = self.cpu_slots
        return make_testbed(self.testbed, **opts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenarios": list(self.scenarios), "policies": list(self.policies), "rounds": self.rounds,
            "repeats": self.repeats, "seeds": list(self.seeds),
            "testbed": self.testbed_dict(),
            "cards": self.cards,
            "policy_options": {p: _jsonable(o) for p, o in self.policy_options.items()},
            "equivalence_tolerance": EQUIVALENCE_TOLERANCE,
            "ablation": self.ablation, "gantt_scenario": self.gantt_scenario,
        }


@dataclass(frozen=True)
class BenchRecord:
    """One (scenario, policy, seed) run and its metrics."""

    scenario: str  # workflow name
    policy: str  # registry name
    online: bool  # False for the oracle reference
    seed: int  # run_loop seed
    run: LoopRun  # every round, with its executions
    metrics: RunMetrics  # the run against the oracle


@dataclass(frozen=True)
class SummaryRow:
    """One (scenario, policy) over its seeds."""

    scenario: str  # workflow name
    policy: str  # registry name
    online: bool  # False for the oracle reference
    seeds: int  # runs aggregated
    tasks: int  # n of the match
    best_match_median: int  # median over seeds of the best oracle match (lower median)
    best_match_min: int  # lowest over seeds
    best_match_max: int  # highest over seeds
    full_match_seeds: int  # seeds whose best match is n/n
    best_match_exact_median: int  # median over seeds of the match against exactly tied mappings only
    best_ratio_mean: float | None  # mean over seeds with a feasible round; None: never feasible
    final_ratio_mean: float | None  # mean over seeds whose last round was feasible
    best_e2e_ms_median: float | None  # median over seeds of the best measured E2E
    first_equivalent_median: int | None  # median round over the seeds that reached equivalence
    first_equivalent_reached: int  # seeds that reached an oracle-equivalent mapping
    executions_mean: float  # executions per run, probes included
    probes_mean: float  # probe executions per run
    infeasible_executions_mean: float  # failed executions per run
    regret_mean: float  # cumulative regret fraction, mean over seeds

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None else round(x, nd)

        return {
            "scenario": self.scenario, "policy": self.policy, "online": self.online, "seeds": self.seeds,
            "tasks": self.tasks,
            "best_match": {"median": self.best_match_median, "min": self.best_match_min,
                           "max": self.best_match_max},
            "full_match_seeds": self.full_match_seeds, "best_match_exact_median": self.best_match_exact_median,
            "best_ratio_mean": r(self.best_ratio_mean),
            "final_ratio_mean": r(self.final_ratio_mean), "best_e2e_ms_median": r(self.best_e2e_ms_median, 3),
            "first_equivalent_round_median": self.first_equivalent_median,
            "first_equivalent_reached": self.first_equivalent_reached,
            "executions_mean": r(self.executions_mean, 2), "probes_mean": r(self.probes_mean, 2),
            "infeasible_executions_mean": r(self.infeasible_executions_mean, 2),
            "regret_mean": r(self.regret_mean, 6),
        }


@dataclass
class BenchResult:
    """Everything one bench produced."""

    config: BenchConfig  # what was asked for
    workflows: dict[str, Workflow]  # scenario -> workflow (after --cards)
    oracles: dict[str, OracleResult]  # scenario -> exhaustive search (noise-free simulator)
    views: dict[str, OracleView]  # scenario -> metrics index of the oracle
    records: list[BenchRecord]  # every run, in scenario, policy, seed order
    notes: list[str]  # skipped parts and why
    ablation: Any = None  # the agent's ablation result (has to_dict/to_markdown), if run
    wall_s: float = 0.0  # time the runs took (outputs excluded)

    def paper_scenarios(self) -> set[str]:
        """The benched workflows that ARE built-in scenarios (the paper's figures apply to them only)."""
        return {n for n, wf in self.workflows.items() if is_paper_scenario(wf, self.config.cards)}

    def summary(self) -> list[SummaryRow]:
        rows = []
        for sc in self.workflows:
            for pol in self.config.policies:
                recs = [r for r in self.records if r.scenario == sc and r.policy == pol]
                if recs:
                    rows.append(summarize(recs))
        return rows


def _median_low(xs: Sequence[float]) -> float:
    return statistics.median_low(xs)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(recs: Sequence[BenchRecord]) -> SummaryRow:
    """Aggregate the seeds of one (scenario, policy)."""
    ms = [r.metrics for r in recs]
    matches = [m.best_match for m in ms]
    firsts = [m.first_equivalent_round for m in ms if m.first_equivalent_round is not None]
    best_e2e = [m.best_e2e_ms for m in ms if m.best_e2e_ms is not None]
    n = ms[0].tasks
    return SummaryRow(
        scenario=recs[0].scenario, policy=recs[0].policy, online=recs[0].online, seeds=len(recs), tasks=n,
        best_match_median=int(_median_low(matches)), best_match_min=min(matches),
        best_match_max=max(matches), full_match_seeds=sum(1 for x in matches if x == n),
        best_match_exact_median=int(_median_low([m.best_match_exact for m in ms])),
        best_ratio_mean=_mean([m.best_ratio for m in ms if m.best_ratio is not None]),
        final_ratio_mean=_mean([m.final_ratio for m in ms if m.final_ratio is not None]),
        best_e2e_ms_median=statistics.median(best_e2e) if best_e2e else None,
        first_equivalent_median=int(_median_low(firsts)) if firsts else None,
        first_equivalent_reached=len(firsts),
        executions_mean=sum(m.executions for m in ms) / len(ms),
        probes_mean=sum(m.probes for m in ms) / len(ms),
        infeasible_executions_mean=sum(m.infeasible_executions for m in ms) / len(ms),
        regret_mean=sum(m.regret for m in ms) / len(ms),
    )


def is_paper_scenario(wf: Workflow, cards: str | None = None) -> bool:
    """True when ``wf`` IS the built-in scenario of its name (the same tasks, edges, budget, decision
    space and card set; ``cards``: the bench's --cards rebinding of the built-in), so the paper's
    figures apply to it; a workflow file that merely calls itself S13 gets none."""
    from agentsched.scenarios import list_scenarios, load_scenario

    if wf.name not in list_scenarios():
        return False
    try:
        ref = load_scenario(wf.name)
        if cards:
            ref = ref.with_cards(cards)
    except AgentschedError:
        return False
    return (wf.tasks == ref.tasks and tuple(map(tuple, wf.edges)) == tuple(map(tuple, ref.edges))
            and wf.vram_budget_mb == ref.vram_budget_mb and wf.decision_space == ref.decision_space
            and wf.card_set == ref.card_set)


def ablation_workflow(cards: str | None) -> tuple[Workflow | None, str | None]:
    """The S13 workflow of the bench's ablation under ``cards``, or (None, why it cannot run)."""
    try:
        wf = resolve_workflow("S13")
        return (wf.with_cards(cards) if cards else wf), None
    except AgentschedError as e:
        return None, f"the S13 ablation skipped: S13 does not resolve under --cards {cards} ({e})"


def run_bench(config: BenchConfig, *, progress: Callable[[str], None] | None = None,
              testbed: Testbed | None = None) -> BenchResult:
    """Run every (scenario, policy, seed); ``progress(label)`` is called after each run.

    ``testbed``: the testbed to run on (the caller closes it); None builds the one ``config`` names
    and closes it at the end."""
    for p in config.policies:
        get_spec(p)  # unknown names fail before any work
    workflows: dict[str, Workflow] = {}
    for sc in config.scenarios:
        wf = resolve_workflow(sc)
        if wf.name in workflows:  # one would silently replace the other
            raise AgentschedError(f"two scenarios are named {wf.name} ({', '.join(_named(config.scenarios, wf.name))})")
        workflows[wf.name] = wf.with_cards(config.cards) if config.cards else wf
    ablation_wf, ablation_note = ablation_workflow(config.cards) if config.ablation else (None, None)
    t0 = time.perf_counter()
    tb = testbed if testbed is not None else config.make_testbed()
    try:
        cache: dict[tuple[str, str], OracleResult] = {}
        notes: list[str] = []
        oracles: dict[str, OracleResult] = {}
        views: dict[str, OracleView] = {}
        for name, wf in workflows.items():
            oracles[name], views[name] = _reference(wf, tb, config, cache, notes)
        records: list[BenchRecord] = []
        # one breaker for every LLM run: once an endpoint failed for good in a run (circuit open),
        # later runs do not call it at all (each round falls back at once) instead of each paying
        # breaker_rounds x timeout again
        llm_down: str | None = None
        for name, wf in workflows.items():
            for pol in config.policies:
                opts = dict(config.policy_options.get(pol, {}))
                if pol == "oracle":
                    opts.setdefault("oracle", oracles[name])  # the reference line reuses the search
                for seed in config.seeds:
                    policy = make_policy(pol, **opts)
                    llm = getattr(policy, "llm", None)
                    if llm is not None and llm_down is not None:
                        llm.hold_open(llm_down)
                    try:
                        run = run_loop(wf, policy, tb, rounds=config.rounds, repeats=config.repeats, seed=seed)
                    finally:
                        if llm is not None:
                            llm.close()
                    if llm is not None and llm_down is None and llm.circuit_open:
                        llm_down = f"held open since {name} seed {seed}: {llm.open_reason}"
                        notes.append(f"{pol}: the LLM endpoint failed in {name} seed {seed} "
                                     f"({llm.open_reason}); every later {pol} run fell back without calling it")
                    records.append(BenchRecord(name, pol, policy.online, seed, run, run_metrics(run, views[name])))
                    if progress is not None:
                        progress(f"{name} {pol} seed {seed}")
    finally:
        if testbed is None:
            tb.close()
    ablation = None
    if ablation_note is not None:
        notes.append(ablation_note)
    elif ablation_wf is not None:
        ablation = _run_ablation(config, notes, ablation_wf)
    return BenchResult(config, workflows, oracles, views, records, notes, ablation,
                       wall_s=time.perf_counter() - t0)


def _reference(wf: Workflow, tb: Testbed, config: BenchConfig, cache: dict, notes: list[str]
               ) -> tuple[OracleResult, OracleView]:
    """The oracle, or for a workflow too large to enumerate the best known mapping (a long local search
    on the noise-free testbed): every ratio of that workflow is then E2E over the best known."""
    from agentsched.oracle import MAX_ORACLE_MAPPINGS

    size = len(wf.decision_space.modes) ** len(wf.tasks)
    if size <= MAX_ORACLE_MAPPINGS:
        res = reference_oracle(wf, tb, repeats=config.repeats, cache=cache)
        return res, oracle_view(wf, res)
    from agentsched.loop.best_known import best_known, noise_free_e2e
    from agentsched.model.execution import Status
    from agentsched.oracle import OracleEntry

    ref = best_known(wf, tb)
    x = tb.expected(wf, ref.mapping)
    assert x is not None  # best_known raised already on a testbed without a noise-free execution
    res = OracleResult(wf.name, (OracleEntry(ref.mapping, Status.OK, ref.e2e_ms, x.peak_vram_mb, x),), ref.evaluations)
    notes.append(f"{wf.name}: no oracle ({size:.3g} mappings); its ratios are over the best known mapping "
                 f"({ref.e2e_ms:.0f} ms, {ref.source}, {ref.evaluations} noise-free runs)")

    class _Lazy(dict):
        def __missing__(self, key: tuple) -> float | None:
            self[key] = noise_free_e2e(wf, tb, dict(zip(wf.task_ids, key, strict=True)))
            return self[key]

    lazy = _Lazy({tuple(ref.mapping[t] for t in wf.task_ids): ref.e2e_ms})
    view = OracleView(workflow=wf.name, task_ids=tuple(wf.task_ids), e2e_ms=ref.e2e_ms, best=dict(ref.mapping),
                      best_mappings=(dict(ref.mapping),), equivalent_mappings=(dict(ref.mapping),),
                      reference_e2e_ms=lazy, mappings_total=size, feasible_total=1)
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


def _run_ablation(config: BenchConfig, notes: list[str], wf: Workflow) -> Any:
    try:
        from agentsched.agent.ablation import run_ablation
    except ImportError as e:
        notes.append(f"ablation skipped: cannot import agentsched.agent.ablation ({e})")
        return None
    if not config.simulated:
        notes.append(f"the S13 ablation ran on the simulated testbed, not on {config.testbed}")
    start = config.policy_options.get("agent-rules", {}).get("start", "warm")  # bench --start reaches it too
    return run_ablation(wf, rounds=config.rounds, repeats=config.repeats, seeds=list(config.seeds), start=start,
                        paper=True)  # the built-in S13 (under --cards) by construction


# ---- results.json ---------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    """Options as JSON (an OracleResult or other object becomes its type name)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return f"<{type(obj).__name__}>"


def _modes(mapping: Mapping[str, Any]) -> dict[str, str]:
    return {t: getattr(m, "value", str(m)) for t, m in mapping.items()}


def round_dicts(run: LoopRun, view: OracleView | None) -> list[dict[str, Any]]:
    """Per-round records as results.json and ``run --json`` write them."""
    out = []
    for rec in run.records:
        r = rec.result
        ref = view.reference(r.mapping) if view is not None else None
        out.append({
            "round": r.round, "mapping": _modes(r.mapping),
            "e2e_ms": None if r.e2e_ms is None else round(r.e2e_ms, 3), "status": r.status.value,
            "executions": rec.executions_after, "probes": len(rec.probes),
            "peak_vram_mb": round(r.peak_vram_mb, 3), "message": r.message,
            "reference_e2e_ms": None if ref is None else round(ref, 3),
        })
    return out


def paper_mapping_reference_ms(wf: Workflow, view: OracleView) -> float | None:
    """Our reference E2E of the paper's oracle mapping (None: not a paper scenario, or infeasible here)."""
    paper = paper_oracle(wf.name)
    if paper is None or set(paper["mapping"]) != set(wf.task_ids):
        return None
    mapping = {t: Mode(m) for t, m in paper["mapping"].items()}
    if any(m not in wf.decision_space.modes for m in mapping.values()):
        return None
    return view.reference(mapping)


def oracle_dict(wf: Workflow, res: OracleResult, view: OracleView, paper_figures: bool = True) -> dict[str, Any]:
    """``paper_figures``: False for a workflow that is not the built-in scenario of its name."""
    paper = paper_oracle(wf.name) if paper_figures else None
    paper_ref = paper_mapping_reference_ms(wf, view) if paper_figures else None
    return {
        "workflow": wf.name, "decision_space": wf.decision_space.value,
        "vram_budget_mb": wf.vram_budget_mb, "total_vram_mb": round(wf.total_vram_mb, 3),
        "card_set": wf.card_set.name, "mapping": _modes(view.best), "e2e_ms": round(view.e2e_ms, 3),
        "tied_mappings": [_modes(m) for m in view.best_mappings],
        "equivalent_mappings": [_modes(m) for m in view.equivalent_mappings],
        "mappings_total": view.mappings_total, "feasible": view.feasible_total,
        "executions": res.executions,
        "paper_mapping": None if paper is None else paper["mapping"],
        "paper_e2e_ms": None if paper is None else paper["e2e_ms"],
        "paper_mapping_e2e_ms": None if paper_ref is None else round(paper_ref, 3),
    }


def results_dict(result: BenchResult) -> dict[str, Any]:
    """The results.json document (schema: agentsched/data/results.schema.json)."""
    from agentsched import __version__

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generator": f"agentsched {__version__}",
        "config": result.config.to_dict(),
        "wall_s": round(result.wall_s, 3),
        "notes": list(result.notes),
        "oracles": {n: oracle_dict(wf, result.oracles[n], result.views[n], n in result.paper_scenarios())
                    for n, wf in result.workflows.items()},
        "records": [
            {"scenario": r.scenario, "policy": r.policy, "online": r.online, "seed": r.seed,
             "rounds": round_dicts(r.run, result.views[r.scenario]), "metrics": r.metrics.to_dict()}
            for r in result.records
        ],
        "summary": [s.to_dict() for s in result.summary()],
    }
    if result.ablation is not None:
        doc["ablation"] = result.ablation.to_dict()
    return doc


def results_schema() -> dict[str, Any]:
    """The JSON Schema of results.json shipped with the package."""
    return json.loads((resources.files("agentsched.data") / "results.schema.json").read_text())


# ---- the paper's figures (agentsched.data.paper_tables) --------------------------------------------


def paper_first_match_rounds() -> dict[str, int]:
    """The paper's first full-match round of its LLM agent per scenario (Table 5: S11 R2, S12 R1, S13 R3)."""
    t5 = paper_tables()["table5_three_way_S11_S13"]
    col = t5["columns"].index("first_full_match_round")
    return {s: row[col] for s, row in t5["rows"].items()}


_PAPER_MODE = {"gpu": "gpu_now", "gpu_now": "gpu_now", "cpu": "cpu", "gpu_queue": "gpu_queue"}


def paper_oracle(scenario: str) -> dict[str, Any] | None:
    """The paper's oracle mapping (Table 3) and E2E (Figure 5 / Table 5) for a built-in scenario."""
    t3 = paper_tables()["table3_scenarios"]
    row = t3["rows"].get(scenario)
    if row is None:
        return None
    mapping = {t: _PAPER_MODE[m] for t, m in zip("ABCD", row[-1], strict=True)}
    e2e = t3.get("oracle_e2e_ms_figure5", {}).get(scenario)
    t5 = paper_tables()["table5_three_way_S11_S13"]["rows"].get(scenario)
    if e2e is None and t5 is not None:
        e2e = float(str(t5[3]).split()[0])  # "1715 +- 24 (n=15)"
    return {"mapping": mapping, "e2e_ms": e2e}


# ---- outputs ----------------------------------------------------------------------------------------


def write_outputs(result: BenchResult, out_dir: str | Path) -> list[Path]:
    """Write results.json, report.md and the PNG plots into ``out_dir``; return the paths."""
    from agentsched.report import markdown, plots

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AgentschedError(f"cannot create output folder {out}: {e.strerror}") from None
    try:
        paths = []
        doc = results_dict(result)
        p = out / "results.json"
        p.write_text(json.dumps(doc, indent=1) + "\n")
        paths.append(p)
        images = plots.write_plots(result, out)
        paths.extend(images)
        p = out / "report.md"
        p.write_text(markdown.render_report(result, [i.name for i in images]))
        paths.append(p)
    except OSError as e:
        raise AgentschedError(f"cannot write the outputs in {out}: {e.strerror or type(e).__name__}") from None
    return paths
