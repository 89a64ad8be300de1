"""Commands: run (one policy in the closed loop), bench (scenarios x policies x seeds + report)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from agentsched.cli.common import (
    CPU_SLOTS_HELP,
    EMULATE_GPU_HELP,
    JSON_HELP,
    JSON_OUT_HELP,
    RAY_ADDRESS_HELP,
    SEED_HELP,
    SIZE_HELP,
    TESTBED_HELP,
    WORLD,
    build_testbed,
    console,
    cpu_cores_option,
    err_console,
    load_workflow_and_world,
    pick_world,
    positive,
    print_json,
    testbed_notes,
)
from agentsched.cli.output import check_output_file, prepare_output_dir, write_json
from agentsched.errors import AgentschedError, TestbedError
from agentsched.model.mapping import format_mapping
from agentsched.model.options import STARTS
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.policies.base import Policy
from agentsched.testbeds.base import Testbed
from agentsched.tools.base import parse_size

START_HELP = "agent policies only: warm (profile cards) or cold (no measurements)"
_LLM_FLAGS = {"base_url": "--llm-base-url", "model": "--llm-model", "api_key": "--llm-api-key",
              "temperature": "--llm-temperature", "timeout_s": "--llm-timeout"}

# The --llm-* options of run and bench, declared once (typer reads these as the parameters' defaults).
LLM_BASE_URL = typer.Option(None, "--llm-base-url", help="agent-llm: OpenAI-compatible URL")
LLM_MODEL = typer.Option(None, "--llm-model", help="agent-llm: model name")
LLM_API_KEY = typer.Option(None, "--llm-api-key", help="agent-llm: API key")
LLM_TEMPERATURE = typer.Option(None, "--llm-temperature", help="agent-llm: temperature")
LLM_TIMEOUT = typer.Option(None, "--llm-timeout", help="agent-llm: request timeout (s)")
LLM_PREDICTIONS = typer.Option(None, "--llm-predictions/--no-llm-predictions",
                               help="agent-llm: add the planner's model predictions (top mappings with predicted "
                                    "E2E, VRAM and a range) to the prompt as a fifth stream (default: off)")


# upper bounds of the loop options: far above any sensible run, far below what overflows or never ends
MAX_ROUNDS = 10_000
MAX_REPEATS = 1_000
MAX_SEEDS = 10_000


def loop_counts(*, rounds: int | None = None, repeats: int | None = None, seeds: int | None = None) -> None:
    """--rounds, --repeats, --seeds: >= 1 and at most MAX_*; one-line AgentschedError otherwise."""
    for flag, value, limit in (("--rounds", rounds, MAX_ROUNDS), ("--repeats", repeats, MAX_REPEATS),
                               ("--seeds", seeds, MAX_SEEDS)):
        if value is None:
            continue
        positive(flag, value)
        if value > limit:
            raise AgentschedError(f"{flag} must be <= {limit:,}, got {value}")


def expand_folders(names: list[str]) -> list[str]:
    """Each folder in ``names`` replaced by its workflow files (*.yaml, *.yml, *.json), sorted."""
    out: list[str] = []
    for n in names:
        p = Path(n)
        if p.is_dir():
            files = sorted(str(f) for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json") and f.is_file())
            if not files:
                raise AgentschedError(f"--scenarios folder {n} holds no workflow files (*.yaml, *.yml, *.json)")
            out.extend(files)
        else:
            out.append(n)
    return out


HEFT_MODEL_HELP = ("heft/heft-cf machine: parallel (default: the GPU runs tasks side by side at isolated "
                   "speed) or classical (one task at a time per processor: --cpu-slots cores, default 1, "
                   "and one GPU)")


def heft_model_option(policies: list[str], options: dict[str, dict[str, Any]],
                      model: str | None) -> dict[str, dict[str, Any]]:
    """``options`` with ``machine=model`` for every policy that takes it (heft, heft-cf); one-line
    error when none of ``policies`` does or the model is unknown."""
    from agentsched.loop.registry import accepts
    from agentsched.policies.heft import MACHINE_MODELS

    if model is None:
        return options
    if model not in MACHINE_MODELS:
        raise AgentschedError(f"--heft-model must be {' or '.join(MACHINE_MODELS)}, got {model!r}")
    takers = [p for p in policies if accepts(p, "machine")]
    if not takers:
        raise AgentschedError(f"--heft-model applies only to heft and heft-cf (got {', '.join(policies)})")
    return {**options, **{p: {**options.get(p, {}), "machine": model} for p in takers}}


def _check_start(start: str | None) -> str | None:
    if start is not None and start not in STARTS:
        raise AgentschedError(f"--start must be warm or cold, got {start!r}")
    return start


def _check_noise(noise: float | None) -> float | None:
    if noise is not None and not (math.isfinite(noise) and noise >= 0):
        raise AgentschedError(f"--noise must be a finite number >= 0, got {noise:g}")
    return noise


def llm_options(*, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                temperature: float | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """The --llm-* values that were given, validated and keyed as the agent expects (given keys only)."""
    given = {"base_url": base_url, "model": model, "api_key": api_key, "temperature": temperature,
             "timeout_s": timeout_s}
    llm = {k: v for k, v in given.items() if v is not None}
    t = llm.get("temperature")
    if t is not None and not (math.isfinite(t) and t >= 0):
        raise AgentschedError(f"--llm-temperature must be a finite number >= 0, got {t:g}")
    s = llm.get("timeout_s")
    if s is not None and not (math.isfinite(s) and s > 0):
        raise AgentschedError(f"--llm-timeout must be a finite number > 0, got {s:g}")
    return llm


def flags_apply(llm: dict[str, Any]) -> str:
    """'--llm-model applies' / '--llm-model, --llm-timeout apply' for the given LLM options."""
    flags = [_LLM_FLAGS[k] for k in llm]
    return f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'}"


def _policy_options(policy: str, start: str | None, llm: dict[str, Any],
                    predictions: bool | None = None) -> dict[str, Any]:
    """make_policy keyword options for ``policy`` from the command line."""
    opts: dict[str, Any] = {}
    if start is not None:
        opts["start"] = start  # make_policy rejects it in one line for policies without a start
    if llm:
        if policy != "agent-llm":
            raise AgentschedError(f"{flags_apply(llm)} only to --policy agent-llm (got {policy})")
        opts["llm"] = llm
    if predictions is not None:
        if policy != "agent-llm":
            raise AgentschedError(f"--llm-predictions applies only to --policy agent-llm (got {policy})")
        if predictions:  # off is the default: the option is left out so the policy is the plain agent-llm
            opts["predictions"] = True
    return opts


def preflight(testbed: Testbed, workflows: list[Workflow]) -> None:
    """Fail before any run when ``testbed`` cannot run these workflows at all (the local testbed on a
    machine without CUDA: every policy and the oracle place tasks on the GPU). One-line TestbedError."""
    for wf in workflows:
        testbed.preflight(wf)


def _world_ref(sim_world: Any, given: str | None, loaded: list[tuple[Any, str | None]]) -> str:
    """How results.json's config names the bench's world so that it can be loaded again: the
    --world value, else the workflow files' world: value (a name or a resolved path)."""
    from agentsched.testbeds.world import choose_world

    return str(choose_world(given, [w for _, w in loaded]))


def policy_preflight(policy: Policy, workflows: list[Workflow]) -> None:
    """The policy's own check before any run (agent-llm: one cheap request to its endpoint): a one-line
    error (``LLM endpoint <url> is not usable: <reason>``) instead of a fallback in every round."""
    for wf in workflows:
        policy.preflight(wf)


SUMMARY_PRINT_MAX_LINES = 40  # evidence lines printed per round (one per task on a large workflow)
MAPPING_PRINT_MAX_TASKS = 16  # beyond this a round line shows mode counts (the JSON keeps every task)


def mapping_text(wf: Workflow, mapping: Any) -> str:
    """``A=gpu,B=cpu`` for a small workflow; ``5000 tasks: 3,120 gpu, 1,880 cpu`` for a large one."""
    if len(wf.tasks) <= MAPPING_PRINT_MAX_TASKS:
        return format_mapping(wf, mapping)
    sp = wf.decision_space
    counts = {m: 0 for m in sp.modes}
    for m in mapping.values():
        counts[m] += 1
    return f"{len(wf.tasks):,} tasks: " + ", ".join(f"{n:,} {sp.label(m)}" for m, n in counts.items() if n)


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
        policy: str = typer.Option(..., "--policy", "-p", help="policy name (see `agentsched policies`)"),
        rounds: int = typer.Option(20, help="rounds (the paper uses 20)"),
        repeats: int = typer.Option(5, help="executions per round; the round's E2E is their median"),
        seed: int = typer.Option(0, help=SEED_HELP),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP + " (the text goes to stderr)"),
        json_file: Optional[Path] = typer.Option(None, "--json-out", help=JSON_OUT_HELP),
        start: Optional[str] = typer.Option(None, "--start", help=START_HELP),
        cards: Optional[str] = typer.Option(None, help="card set name or JSON file (default: the workflow's)"),
        testbed: str = typer.Option("sim", help=TESTBED_HELP),
        size: str = typer.Option("small", help=SIZE_HELP),
        noise: Optional[float] = typer.Option(None, help="sim noise sigma (default 0.03; 0 = expected values)"),
        cpu_slots: Optional[int] = typer.Option(None, "--cpu-slots", help=CPU_SLOTS_HELP),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help=RAY_ADDRESS_HELP),
        emulate_gpu: bool = typer.Option(False, "--emulate-gpu", help=EMULATE_GPU_HELP),
        world: Optional[str] = WORLD,
        heft_model: Optional[str] = typer.Option(None, "--heft-model", help=HEFT_MODEL_HELP),
        oracle: bool = typer.Option(True, "--oracle/--no-oracle",
                                    help="compare with the brute-force oracle (noise-free on sim)"),
        llm_base_url: Optional[str] = LLM_BASE_URL,
        llm_model: Optional[str] = LLM_MODEL,
        llm_api_key: Optional[str] = LLM_API_KEY,
        llm_temperature: Optional[float] = LLM_TEMPERATURE,
        llm_timeout: Optional[float] = LLM_TIMEOUT,
        llm_predictions: Optional[bool] = LLM_PREDICTIONS,
    ) -> None:
        """Run one policy in the closed loop and compare its best mapping with the oracle."""
        from agentsched.experiments.bench import round_dicts
        from agentsched.loop.metrics import oracle_view, run_metrics
        from agentsched.loop.registry import get_spec, make_policy
        from agentsched.loop.runner import reference_oracle, run_loop

        loop_counts(rounds=rounds, repeats=repeats)
        say = err_console if json_out else console  # with --json, stdout holds the JSON only
        _check_noise(noise)
        spec = get_spec(policy)
        llm = llm_options(base_url=llm_base_url, model=llm_model, api_key=llm_api_key,
                          temperature=llm_temperature, timeout_s=llm_timeout)
        opts = cpu_cores_option(spec.name.value, _policy_options(spec.name.value, _check_start(start), llm,
                                                                 llm_predictions), cpu_slots)
        opts = heft_model_option([spec.name.value], {spec.name.value: opts}, heft_model)[spec.name.value]
        pol = make_policy(spec.name.value, **opts)
        wf, wf_world = load_workflow_and_world(workflow, cards)
        sim_world = pick_world(testbed, world, [wf_world])
        if json_file is not None:
            check_output_file(json_file, "--json-out")  # before the work, not after it
        try:
            policy_preflight(pol, [wf])  # an unusable LLM endpoint: one line now, not a fallback in every round
        except BaseException:
            pol.close()
            raise
        tb = build_testbed(testbed, seed=seed, noise=noise, size=size, cpu_slots=cpu_slots, world=sim_world,
                           ray_address=ray_address, emulate_gpu=emulate_gpu)
        tb_notes = testbed_notes(tb)
        sp = wf.decision_space
        try:
            preflight(tb, [wf])  # e.g. the local testbed without CUDA: one line, before any run
            res = None
            if oracle or spec.name.value == "oracle":
                try:
                    res = reference_oracle(wf, tb, repeats=repeats)
                except TestbedError:
                    raise  # the testbed cannot run this: the loop could not either
                except AgentschedError as e:
                    if spec.name.value == "oracle":
                        raise
                    say.print(f"note: {e}; running without it", highlight=False, markup=False)
            if res is not None and spec.name.value == "oracle":
                pol = make_policy("oracle", oracle=res)
            width = len(mapping_text(wf, {t: sp.modes[-1] for t in wf.task_ids}))

            def show(rec: Any) -> None:
                r = rec.result
                status = r.status.value + (f" ({r.message})" if r.message else "")
                say.print(f"R{r.round:<3d} {mapping_text(wf, r.mapping):<{width}s}"
                              f"  E2E {_fmt_ms(r.e2e_ms):>10s} ms"
                              f"  {status}  executions {rec.executions_after}"
                              + (f" ({plural(len(rec.probes), 'probe')})" if rec.probes else ""), highlight=False, markup=False,
                              soft_wrap=True)  # one line per round, however wide
                summary = (rec.evidence or {}).get("summary") if isinstance(rec.evidence, dict) else None
                summary = list(summary or [])
                for line in summary[:SUMMARY_PRINT_MAX_LINES]:
                    say.print(f"      {line}", highlight=False, markup=False)
                if len(summary) > SUMMARY_PRINT_MAX_LINES:
                    more = len(summary) - SUMMARY_PRINT_MAX_LINES
                    say.print(f"      ... {more:,} more line{'s' if more != 1 else ''} (all in --json / --json-out)",
                                  highlight=False, markup=False)

            say.print(f"{wf.name} ({sp.value}, budget "
                          f"{'none' if wf.vram_budget_mb is None else f'{wf.vram_budget_mb:g} MB'}), policy "
                          f"{pol.label}{'' if pol.online else ' (offline reference)'}, {plural(rounds, 'round')} x "
                          f"{plural(repeats, 'execution')}, seed {seed}", highlight=False, markup=False)
            for n in tb_notes:
                console.print(f"note: {n}", highlight=False, markup=False)
            run = run_loop(wf, pol, tb, rounds=rounds, repeats=repeats, seed=seed, on_round=show)
        finally:
            try:
                pol.close()
            finally:
                tb.close()
        view = oracle_view(wf, res) if res is not None else None
        metrics = run_metrics(run, view) if view is not None else None
        best = run.best_round()
        if best is None:
            say.print("best: no feasible round", highlight=False)
        else:
            ratio = f", {metrics.best_ratio:.3f}x oracle" if metrics and metrics.best_ratio else ""
            say.print(f"best:   R{best.round} {mapping_text(wf, best.mapping)}  E2E {_fmt_ms(best.e2e_ms)} ms"
                          f"{ratio}", highlight=False, markup=False)
        if view is not None and metrics is not None:
            say.print(f"oracle: {mapping_text(wf, view.best)}  E2E {_fmt_ms(view.e2e_ms)} ms"
                          f"{' (noise-free)' if testbed == 'sim' else ''}", highlight=False, markup=False)
            first = "never" if metrics.first_equivalent_round is None else f"R{metrics.first_equivalent_round}"
            # an execution that fails at once costs ~0 ms: a never-feasible run's regret means nothing
            regret = "n/a (never feasible)" if metrics.best_ratio is None else f"{round(metrics.regret, 3) + 0.0:.3f}"
            say.print(f"match {metrics.best_match}/{metrics.tasks}, first oracle-equivalent round {first}, "
                          f"executions {metrics.executions} ({plural(metrics.probes, 'probe')}, "
                          f"{metrics.infeasible_executions} infeasible), regret {regret}",
                          highlight=False, markup=False)
        if json_file is not None or json_out:
            rounds_out = round_dicts(run, view)
            for d, rec in zip(rounds_out, run.records, strict=True):
                d["evidence"] = rec.evidence
                for key in ("prompt", "response"):
                    if key in rec.proposal_info:
                        d[key] = rec.proposal_info[key]
            doc = {
                "workflow": wf.name, "policy": spec.name.value, "online": pol.online, "seed": seed,
                "policy_info": pol.describe(),  # e.g. an LLM's model and base URL (credentials redacted)
                "testbed": {"name": tb.name, "notes": tb_notes}, "rounds": rounds_out,
                "best": None if best is None else {
                    "round": best.round, "mapping": {t: m.value for t, m in best.mapping.items()},
                    "e2e_ms": round(best.e2e_ms or 0.0, 3)},
                "oracle": None if view is None else {
                    "mapping": {t: m.value for t, m in view.best.items()}, "e2e_ms": round(view.e2e_ms, 3)},
                "metrics": None if metrics is None else metrics.to_dict(),
            }
            if json_file is not None:
                write_json(json_file, doc)
                say.print(f"rounds written to {json_file}", highlight=False, markup=False)
            if json_out:
                print_json(doc)

    @app.command("policies")
    def policies_cmd() -> None:
        """List the registered policies."""
        from agentsched.loop.registry import REGISTRY, is_available

        t = Table(title="Policies")
        for col in ("name", "kind", "options", "description"):
            t.add_column(col)
        for name, spec in REGISTRY.items():
            kind = "offline reference" if not spec.online else ("baseline" if spec.baseline else "agent")
            if not spec.baseline and spec.online and not is_available(name):
                kind += " (not installed)"
            t.add_row(name, kind, ", ".join(sorted(spec.options)) or "-", spec.summary)
        console.print(t)

    @app.command("bench")
    def bench_cmd(
        scenarios: Optional[str] = typer.Option(None, help="comma-separated scenarios, workflow files or "
                                                           "folders of them (default: all 13)"),
        policies: Optional[str] = typer.Option(None, help="comma-separated policies (default: every baseline, "
                                                          "oracle, agent-rules, agent-rules-cold, agent-plan, agent-plan-cold)"),
        rounds: int = typer.Option(20, help="rounds per run"),
        repeats: int = typer.Option(5, help="executions per round (median)"),
        seeds: int = typer.Option(5, help="runs per scenario and policy, seeds 0..N-1"),
        out: Path = typer.Option(Path("bench-out"), help="output folder (results.json, report.md, PNGs)"),
        start: Optional[str] = typer.Option(None, "--start", help=START_HELP),
        cards: Optional[str] = typer.Option(None, help="rebind every scenario to this card set"),
        testbed: str = typer.Option("sim", help=TESTBED_HELP),
        size: str = typer.Option("small", help=SIZE_HELP),
        noise: Optional[float] = typer.Option(None, help="sim noise sigma (default 0.03)"),
        cpu_slots: Optional[int] = typer.Option(None, "--cpu-slots", help=CPU_SLOTS_HELP),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help=RAY_ADDRESS_HELP),
        emulate_gpu: bool = typer.Option(False, "--emulate-gpu", help=EMULATE_GPU_HELP),
        world: Optional[str] = WORLD,
        heft_model: Optional[str] = typer.Option(None, "--heft-model", help=HEFT_MODEL_HELP),
        ablation: Optional[bool] = typer.Option(None, "--ablation/--no-ablation",
                                                help="the agent's S13 ablation (default: on when agent-rules runs)"),
        gantt: Optional[str] = typer.Option(None, "--gantt", help="scenario of the all-GPU vs oracle Gantt chart "
                                                                   "(default: S5 when it runs)"),
        resume: bool = typer.Option(False, "--resume", help="continue an interrupted bench in --out (its runs are "
                                                            "recorded in OUT/journal.sqlite as they finish)"),
        llm_base_url: Optional[str] = LLM_BASE_URL,
        llm_model: Optional[str] = LLM_MODEL,
        llm_api_key: Optional[str] = LLM_API_KEY,
        llm_temperature: Optional[float] = LLM_TEMPERATURE,
        llm_timeout: Optional[float] = LLM_TIMEOUT,
        llm_predictions: Optional[bool] = LLM_PREDICTIONS,
    ) -> None:
        """Run scenarios x policies x seeds on a testbed (the simulator by default); write results.json,
        report.md and plots."""
        from agentsched.cli.progress import bench_progress
        from agentsched.experiments.bench import BenchConfig, run_bench
        from agentsched.experiments.folder_lock import hold_folder
        from agentsched.experiments.journal import JOURNAL_NAME, RunJournal
        from agentsched.loop.registry import (
            accepts,
            baseline_policies,
            get_spec,
            is_available,
        )
        from agentsched.report.outputs import write_outputs
        from agentsched.scenarios import list_scenarios, resolve_workflow

        loop_counts(rounds=rounds, repeats=repeats, seeds=seeds)
        _check_noise(noise)
        _check_start(start)
        llm = llm_options(base_url=llm_base_url, model=llm_model, api_key=llm_api_key,
                          temperature=llm_temperature, timeout_s=llm_timeout)
        notes: list[str] = []
        if policies is None:
            pols = baseline_policies() + ["oracle"]
            if is_available("agent-rules"):
                pols += ["agent-rules", "agent-rules-cold"]
            if is_available("agent-plan"):  # beyond the paper: the model-based planner, beside every baseline
                pols += ["agent-plan", "agent-plan-cold"]
            else:
                notes.append("agent-rules skipped: agentsched.agent.policy is not importable")
        else:
            pols = [get_spec(p).name.value for p in (x.strip() for x in policies.split(",")) if p]
            if not pols:
                raise AgentschedError("--policies is empty")
            dup = sorted({p for p in pols if pols.count(p) > 1})
            if dup:
                raise AgentschedError(f"--policies names {', '.join(dup)} twice")
        names = list_scenarios() if scenarios is None else [s.strip() for s in scenarios.split(",") if s.strip()]
        names = expand_folders(names)  # a folder (e.g. from `agentsched generate`) means its workflow files
        if not names:
            raise AgentschedError("--scenarios is empty")
        for n in names:
            resolve_workflow(n)  # one-line error for an unknown scenario or bad file, before any run
        if llm and "agent-llm" not in pols:
            raise AgentschedError(f"{flags_apply(llm)} only when agent-llm is among --policies")
        options: dict[str, dict[str, Any]] = {}
        if start is not None:
            takers = [p for p in pols if accepts(p, "start")]
            if not takers:
                raise AgentschedError(f"--start {start}: none of the chosen policies has a start option "
                                      "(agent-rules, agent-llm, agent-plan do)")
            for p in takers:
                options.setdefault(p, {})["start"] = start
        if llm:
            options.setdefault("agent-llm", {})["llm"] = llm
        if llm_predictions is not None and "agent-llm" not in pols:
            raise AgentschedError("--llm-predictions applies only when agent-llm is among --policies")
        if llm_predictions:
            options.setdefault("agent-llm", {})["predictions"] = True
        loaded = [load_workflow_and_world(n, cards) for n in names]  # the card set too, up front
        wfs = [wf for wf, _ in loaded]
        sim_world = pick_world(testbed, world, [w for _, w in loaded])
        ran = [wf.name for wf in wfs]
        for wf_name in ran:
            if ran.count(wf_name) > 1:  # one would silently replace the other
                given = [n for n, w in zip(names, wfs, strict=True) if w.name == wf_name]
                raise AgentschedError(f"--scenarios names workflow {wf_name} twice ({', '.join(given)})")
        if gantt is not None and gantt.upper() not in [r.upper() for r in ran]:
            raise AgentschedError(f"--gantt {gantt} is not among the benched scenarios ({', '.join(ran)})")
        gantt_name = next((r for r in ran if gantt is not None and r.upper() == gantt.upper()), "S5")
        if cpu_slots is not None:
            positive("--cpu-slots", cpu_slots)
            for p in pols:  # static schedulers plan as many CPU cores as the testbed has
                if accepts(p, "cpu_cores"):
                    options[p] = cpu_cores_option(p, options.get(p, {}), cpu_slots)
        options = heft_model_option(pols, options, heft_model)
        from agentsched.loop.registry import make_policy

        for p in pols:  # an unusable LLM endpoint: one line now, not hours of fallbacks
            if p == "oracle":
                continue  # built per scenario from the search; nothing to check
            probe_policy = make_policy(p, **options.get(p, {}))
            try:
                policy_preflight(probe_policy, wfs)
            finally:
                probe_policy.close()
        tb = build_testbed(testbed, seed=0, noise=noise, size=size, cpu_slots=cpu_slots, world=sim_world,
                           ray_address=ray_address, emulate_gpu=emulate_gpu)
        notes[:0] = testbed_notes(tb)
        try:
            preflight(tb, wfs)  # e.g. the local testbed without CUDA: one line, before any run
            prepare_output_dir(out)  # an unwritable --out fails now, not after the runs
            hold_folder(out)  # one bench per --out: a second one is refused while this one runs
            local = tb.name != "sim"
            # the ablation runs on the simulator: on by default only when the bench does too
            want_ablation = ("agent-rules" in pols and not local) if ablation is None else ablation
            config = BenchConfig(scenarios=tuple(names), policies=tuple(pols), rounds=rounds, repeats=repeats,
                                 seeds=tuple(range(seeds)), testbed=tb.name,
                                 noise_sigma=0.03 if noise is None else noise,
                                 size=size if sim_world is not None else parse_size(size).value,
                                 cpu_slots=cpu_slots, cards=cards, policy_options=options,
                                 world=None if sim_world is None else _world_ref(sim_world, world, loaded),
                                 ablation=want_ablation, gantt_scenario=gantt_name)
            # progress starts after every check: an error above is the only line on stderr
            with bench_progress(console, scenarios=len(names), runs_per_scenario=len(pols) * seeds) as progress:
                journal = RunJournal(Path(out) / JOURNAL_NAME, config.to_dict(), resume=resume)
                try:
                    result = run_bench(config, testbed=tb, journal=journal, progress=progress)
                finally:
                    journal.close()
            if journal.resumed:
                notes.append(f"resumed: {journal.resumed} finished runs (bench and S13 ablation runs together) "
                             f"taken from {Path(out) / JOURNAL_NAME}")
        finally:
            tb.close()
        result.notes[:0] = notes
        paths = write_outputs(result, out)
        _print_summary(result)
        for n in result.notes:
            console.print(f"note: {n}", highlight=False, markup=False)
        console.print(f"{plural(len(result.records), 'run')} in {result.wall_s:.1f} s; wrote "
                      + ", ".join(str(p) for p in paths), highlight=False, markup=False)


def _print_summary(result: Any) -> None:
    t = Table(title="Bench summary (mean/median over seeds; ratios against the oracle)")
    for col in ("scenario", "policy", "match", "full seeds", "best/oracle", "final/oracle", "first eq. round",
                "executions", "regret"):
        t.add_column(col, justify="left" if col in ("scenario", "policy") else "right")
    for s in result.summary():
        first = "never" if s.first_equivalent_median is None else \
            f"R{s.first_equivalent_median} ({s.first_equivalent_reached}/{s.seeds})"
        t.add_row(s.scenario, s.policy + ("" if s.online else " (ref)"),
                  f"{s.best_match_median}/{s.tasks}", f"{s.full_match_seeds}/{s.seeds}",
                  "OOM" if s.best_ratio_mean is None else f"{s.best_ratio_mean:.3f}",
                  "OOM" if s.final_ratio_mean is None else f"{s.final_ratio_mean:.3f}", first,
                  f"{s.executions_mean:g}",
                  # an execution that fails at once costs ~0 ms: a never-feasible policy's regret means nothing
                  "n/a (oom)" if s.best_ratio_mean is None else f"{round(s.regret_mean, 3) + 0.0:.3f}")  # no -0.000
    console.print(t)
