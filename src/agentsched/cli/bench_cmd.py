"""Command: bench (scenarios x policies x seeds on one testbed spec; results.json, report.md, plots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from agentsched.cli import options as o
from agentsched.cli.common import (
    console,
    err_console,
    load_workflow_and_world,
    loop_counts,
    preflight,
    print_json,
    testbed_notes,
    testbed_spec,
)
from agentsched.cli.policy_opts import PolicyFlags, llm_given, policy_options
from agentsched.errors import AgentschedError
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.testbeds.spec import TestbedSpec

# bench's own options (cli/options.py holds those several commands share); each names its flag,
# which tests/cli/test_options.py's scan reads
SCENARIOS = typer.Option(
    None, "--scenarios", help="comma-separated scenarios, workflow files or folders of them (default: all 13)"
)
POLICIES = typer.Option(
    None,
    "--policies",
    help="comma-separated policies (default: every baseline, oracle, "
    "agent-rules, agent-rules-cold, agent-plan, agent-plan-cold)",
)
# bench's own folder and files
BENCH_OUT = o.variant(o.OUT, default=Path("bench-out"), help="output folder (results.json, report.md, PNGs)")
ABLATION = typer.Option(
    None, "--ablation/--no-ablation", help="the agent's S13 ablation (default: on when agent-rules runs)"
)
GANTT = typer.Option(None, "--gantt", help="scenario of the all-GPU vs oracle Gantt chart (default: S5 when it runs)")
RESUME = typer.Option(
    False,
    "--resume",
    help="continue an interrupted bench in --out (its runs are recorded in OUT/journal.sqlite as they finish)",
)
# the document printed is results.json's (bench writes files, not one run's text)
BENCH_JSON = o.variant(o.JSON, help=o.JSON_HELP + " (results.json's document; the text goes to stderr)")


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


def _policies(text: str | None, notes: list[str]) -> list[str]:
    """--policies as registry names (default: every baseline, the oracle and the agents installed)."""
    from agentsched.loop.registry import baseline_policies, get_spec, is_available

    if text is None:
        pols = baseline_policies() + ["oracle"]
        if is_available("agent-rules"):
            pols += ["agent-rules", "agent-rules-cold"]
        if is_available("agent-plan"):  # beyond the paper: the model-based planner, beside every baseline
            pols += ["agent-plan", "agent-plan-cold"]
        else:
            notes.append("agent-rules skipped: agentsched.agent.policy is not importable")
        return pols
    pols = [get_spec(p).name.value for p in (x.strip() for x in text.split(",")) if p]
    if not pols:
        raise AgentschedError("--policies is empty")
    dup = sorted({p for p in pols if pols.count(p) > 1})
    if dup:
        raise AgentschedError(f"--policies names {', '.join(dup)} twice")
    return pols


def _scenarios(text: str | None) -> list[str]:
    """--scenarios (folders expanded), each resolved once here: an unknown one fails before any run."""
    from agentsched.scenarios import list_scenarios, resolve_workflow

    names = list_scenarios() if text is None else [s.strip() for s in text.split(",") if s.strip()]
    names = expand_folders(names)  # a folder (e.g. from `agentsched generate`) means its workflow files
    if not names:
        raise AgentschedError("--scenarios is empty")
    for n in names:
        resolve_workflow(n)
    return names


def _gantt_name(names: list[str], wfs: list[Workflow], gantt: str | None) -> str:
    """The Gantt chart's scenario; one-line error for a workflow named twice or a --gantt not benched."""
    ran = [wf.name for wf in wfs]
    for wf_name in ran:
        if ran.count(wf_name) > 1:  # one would silently replace the other
            given = [n for n, w in zip(names, wfs, strict=True) if w.name == wf_name]
            raise AgentschedError(f"--scenarios names workflow {wf_name} twice ({', '.join(given)})")
    if gantt is not None and gantt.upper() not in [r.upper() for r in ran]:
        raise AgentschedError(f"--gantt {gantt} is not among the benched scenarios ({', '.join(ran)})")
    return next((r for r in ran if gantt is not None and r.upper() == gantt.upper()), "S5")


def _check_policies(pols: list[str], options: dict[str, dict[str, Any]], wfs: list[Workflow]) -> None:
    """Build each policy once with its options and run its preflight (an unusable LLM endpoint: one
    line now, not hours of fallbacks) on the workflows it takes on. One that is too large for a policy
    is the bench's note later; no workflow any chosen policy can run is one line now."""
    from agentsched.experiments.bench import policy_limits, runnable_workflows

    named = {wf.name: wf for wf in wfs}
    runnable_workflows(pols, named, policy_limits(pols, options, named, preflight=True))


def _run(
    config: Any, spec: TestbedSpec, wfs: list[Workflow], out: Path, resume: bool, notes: list[str], say: Any = console
) -> tuple[Any, list[Path]]:
    """Build the testbed, run the bench with its progress bar and journal, write its outputs; the result
    (notes first) and the files written."""
    from agentsched.cli.output import prepare_output_dir
    from agentsched.cli.progress import bench_progress
    from agentsched.experiments.bench import run_bench
    from agentsched.experiments.folder_lock import hold_folder, release_folder
    from agentsched.experiments.journal import JOURNAL_NAME, RunJournal
    from agentsched.report.outputs import output_names, write_outputs

    tb = spec.build()
    notes[:0] = testbed_notes(tb)
    try:
        preflight(tb, wfs)  # e.g. the local testbed without CUDA: one line, before any run
        # an unwritable --out, or a folder where an output file goes, fails now, not after the runs
        prepare_output_dir(out, files=(*output_names(config.gantt_scenario), JOURNAL_NAME))
        hold_folder(out)  # one bench per --out: a second one is refused while this one runs
        journal = RunJournal(Path(out) / JOURNAL_NAME, config.to_dict(), resume=resume)
        try:
            # progress starts after every check: an error above is the only line on stderr
            runs = len(config.policies) * len(config.seeds)
            with bench_progress(say, scenarios=len(config.scenarios), runs_per_scenario=runs) as progress:
                result = run_bench(config, testbed=tb, journal=journal, progress=progress)
            if journal.resumed:
                notes.append(
                    f"resumed: {journal.resumed} finished runs (bench and S13 ablation runs together) "
                    f"taken from {Path(out) / JOURNAL_NAME}"
                )
            result.notes[:0] = notes
            paths = write_outputs(result, out)
            journal.finish()  # after the outputs: a bench whose files could not be written stays resumable
        except KeyboardInterrupt:
            err_console.print(
                f"the finished runs are kept in {Path(out) / JOURNAL_NAME}: continue with --resume",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            raise
        finally:
            journal.close()
            release_folder(out)  # the study is over: its lock file goes
    finally:
        tb.close()
    return result, paths


def bench_cmd(
    scenarios: str | None = SCENARIOS,
    policies: str | None = POLICIES,
    rounds: int = o.ROUNDS,
    repeats: int = o.REPEATS,
    seeds: int = o.SEEDS,
    out: Path = BENCH_OUT,
    start: o.StartKind | None = o.START,
    cards: str | None = o.CARDS,
    testbed: o.TestbedKind = o.TESTBED,
    size: o.Size = o.SIZE,
    noise: float | None = o.NOISE,
    cpu_slots: int | None = o.CPU_SLOTS,
    ray_address: str | None = o.RAY_ADDRESS,
    emulate_gpu: bool = o.EMULATE_GPU,
    world: str | None = o.WORLD,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    heft_model: o.HeftMachine | None = o.HEFT_MODEL,  # type: ignore[valid-type]
    policy_option: list[str] | None = o.POLICY_OPTION,
    ablation: bool | None = ABLATION,
    gantt: str | None = GANTT,
    resume: bool = RESUME,
    llm_base_url: str | None = o.LLM_BASE_URL,
    llm_model: str | None = o.LLM_MODEL,
    llm_api_key: str | None = o.LLM_API_KEY,
    llm_temperature: float | None = o.LLM_TEMPERATURE,
    llm_timeout: float | None = o.LLM_TIMEOUT,
    llm_max_tokens: int | None = o.LLM_MAX_TOKENS,
    llm_predictions: bool | None = o.LLM_PREDICTIONS,
    json_out: bool = BENCH_JSON,
) -> None:
    """Run scenarios x policies x seeds on a testbed (the simulator by default); write results.json,
    report.md and plots."""
    loop_counts(rounds=rounds, repeats=repeats, seeds=seeds)
    notes: list[str] = []
    pols = _policies(policies, notes)
    names = _scenarios(scenarios)
    flags = PolicyFlags(
        start=start and start.value,
        heft_model=heft_model and heft_model.value,
        cpu_slots=cpu_slots,
        llm=llm_given(
            base_url=llm_base_url,
            model=llm_model,
            api_key=llm_api_key,
            temperature=llm_temperature,
            timeout_s=llm_timeout,
            max_tokens=llm_max_tokens,
        ),
        predictions=llm_predictions,
        items=tuple(policy_option or ()),
    )
    options = policy_options(pols, flags)
    loaded = [load_workflow_and_world(n, cards) for n in names]  # the card set too, up front
    wfs = [wf for wf, _ in loaded]
    gantt_name = _gantt_name(names, wfs, gantt)
    spec = testbed_spec(
        testbed,
        seed=0,
        noise=noise,
        size=size,
        cpu_slots=cpu_slots,
        world=world,
        from_workflows=[w for _, w in loaded],
        ray_address=ray_address,
        emulate_gpu=emulate_gpu,
        task_timeout_s=task_timeout_s,
    )
    config = _checked_config(
        names, pols, options, wfs, spec, cards, ablation, gantt_name, rounds=rounds, repeats=repeats, seeds=seeds
    )
    say = err_console if json_out else console  # with --json, stdout holds the JSON only
    result, paths = _run(config, spec, wfs, out, resume, notes, say)
    _print_outcome(result, paths, json_out, say)


def _checked_config(
    names: list[str],
    pols: list[str],
    options: dict[str, dict[str, Any]],
    wfs: list[Workflow],
    spec: TestbedSpec,
    cards: str | None,
    ablation: bool | None,
    gantt_scenario: str,
    *,
    rounds: int,
    repeats: int,
    seeds: int,
) -> Any:
    """The bench's ``BenchConfig``, once the testbed has the cards it needs for every workflow and
    each policy has passed its preflight."""
    from agentsched.experiments.bench import BenchConfig
    from agentsched.runtime.setup import check_sim_cards

    for wf in wfs:  # user tools without cards: the simulator would report placeholder times
        check_sim_cards(spec, wf)
    _check_policies(pols, options, wfs)
    # the ablation runs on the simulator: on by default only when the bench does too
    want_ablation = ("agent-rules" in pols and spec.simulated) if ablation is None else ablation
    return BenchConfig(
        scenarios=tuple(names),
        policies=tuple(pols),
        rounds=rounds,
        repeats=repeats,
        seeds=tuple(range(seeds)),
        testbed=spec,
        cards=cards,
        policy_options=options,
        ablation=want_ablation,
        gantt_scenario=gantt_scenario,
    )


def _print_outcome(result: Any, paths: list[Path], json_out: bool, say: Any) -> None:
    """The summary table, the notes, the files written and, with --json, results.json's document."""
    _print_summary(result, say)
    for n in result.notes:
        say.print(f"note: {n}", highlight=False, markup=False, soft_wrap=True)  # a note is one line, also in a log
    say.print(
        f"{plural(len(result.records), 'run')} in {result.wall_s:.1f} s; wrote " + ", ".join(str(p) for p in paths),
        highlight=False,
        markup=False,
    )
    if json_out:
        from agentsched.experiments.results import results_dict

        print_json(results_dict(result))


def _print_summary(result: Any, say: Any = console) -> None:
    t = Table(title="Bench summary (mean/median over seeds; ratios against the oracle)")
    for col in (
        "scenario",
        "policy",
        "match",
        "full seeds",
        "best/oracle",
        "final/oracle",
        "first eq. round",
        "executions",
        "regret",
    ):
        t.add_column(col, justify="left" if col in ("scenario", "policy") else "right")
    for s in result.summary():
        first = (
            "never"
            if s.first_equivalent_median is None
            else f"R{s.first_equivalent_median} ({s.first_equivalent_reached}/{s.seeds})"
        )
        t.add_row(
            s.scenario,
            s.policy + ("" if s.online else " (ref)"),
            f"{s.best_match_median}/{s.tasks}",
            f"{s.full_match_seeds}/{s.seeds}",
            "OOM" if s.best_ratio_mean is None else f"{s.best_ratio_mean:.3f}",
            "OOM" if s.final_ratio_mean is None else f"{s.final_ratio_mean:.3f}",
            first,
            f"{s.executions_mean:g}",
            # an execution that fails at once costs ~0 ms: a never-feasible policy's regret means nothing
            "n/a (oom)" if s.best_ratio_mean is None else f"{round(s.regret_mean, 3) + 0.0:.3f}",
        )  # no -0.000
    say.print(t)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)
