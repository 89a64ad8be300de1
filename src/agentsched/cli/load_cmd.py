"""Command: load (a stream of invocations of several workflows sharing one machine)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentsched.cli import options as opt
from agentsched.errors import AgentschedError
from agentsched.model.budget import vram_budget_problem


def _floats(text: str | None, flag: str) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AgentschedError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not (v > 0 and v < float("inf")) for v in values):
        raise AgentschedError(f"{flag}: every value must be a finite number > 0, got {text!r}")
    return values


# load's own options (the shared ones are in cli/options.py)
LOAD = typer.Option(None, "--load", help="loads, comma-separated (arrival rate / capacity, e.g. 0.3,0.6,0.9)")
# load takes --load or --rates: optional here
RATES = opt.variant(opt.RATES, default=None, help="arrival rates per simulated second instead of --load")
POLICIES = typer.Option(
    None,
    "--policies",
    help="comma-separated load policies (default: traffic-aware and every baseline with and without admission)",
)
# a seed is an arrival stream here, not a closed-loop run
SEEDS = opt.variant(opt.SEEDS, default=3, help="streams per policy and load (the same streams for every policy)")
# the slots of the stream's one shared simulated machine (bounded: a load must be able to queue)
CPU_SLOTS = opt.variant(opt.CPU_SLOTS, default=16, help="CPU slots shared by all invocations")
OUT = opt.variant(opt.OUT, default=Path("load-out"), help="output folder (report.md, the plot, load.json)")
NO_PLOT = typer.Option(False, "--no-plot", help="skip the latency-vs-load plot")
CAPACITY_PER_S = typer.Option(
    None,
    "--capacity-per-s",
    help="the mix's capacity, from an earlier study's load.json: skips the capacity and saturation searches (minutes)",
)
JOBS = typer.Option(
    None,
    "--jobs",
    help="simulations side by side in this many processes (default: one per core, at most 16; the figures "
    "do not depend on it)",
)


def load_cmd(
    workflows: list[str] = typer.Argument(..., help="scenario names or workflow files (the mix)"),
    load: str = LOAD,
    rates: str = RATES,
    arrival: str = opt.ARRIVAL,
    duration_s: float = opt.DURATION_S,
    policies: str = POLICIES,
    seeds: int = SEEDS,
    vram_budget_mb: float = opt.VRAM_BUDGET_MB,
    cpu_slots: int = CPU_SLOTS,
    noise: float | None = opt.NOISE,
    world: str = opt.WORLD,
    out: Path = OUT,
    no_plot: bool = NO_PLOT,
    json_out: bool = opt.JSON,
    json_file: str = opt.JSON_OUT,
    capacity_per_s: float | None = CAPACITY_PER_S,
    jobs: int | None = JOBS,
) -> None:
    """Latency percentiles and throughput of policies over an arrival stream of a workflow mix."""
    from agentsched.cli.common import err_console, positive
    from agentsched.cli.output import check_output_file, emit, prepare_output_dir, write_json
    from agentsched.cli.progress import load_progress
    from agentsched.experiments.folder_lock import hold_folder, release_folder
    from agentsched.experiments.jobs import default_jobs
    from agentsched.experiments.traffic import Machine, check_study, run_load, study_steps
    from agentsched.report.traffic_report import LOAD_OUTPUTS, load_markdown, write_load_report
    from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA

    loads, rate_list = _floats(load, "--load"), _floats(rates, "--rates")
    if (loads is None) == (rate_list is None):
        raise AgentschedError("give exactly one of --load and --rates")
    positive("--seeds", seeds)
    positive("--cpu-slots", cpu_slots)
    if jobs is not None:
        positive("--jobs", jobs)
    wfs, world = _mix(workflows, noise, world)
    names = _policy_names(policies)
    # the study and the outputs are checked before minutes of capacity search, not after them (and the
    # folder is made only for a study that can run)
    check_study(wfs, names, duration_s, seeds, loads, rate_list, arrival, capacity_per_s)
    budget = _shared_budget_mb(wfs, vram_budget_mb)
    if json_file is not None:
        check_output_file(json_file, "--json-out")
    out_dir = prepare_output_dir(out, files=LOAD_OUTPUTS)
    hold_folder(out_dir)  # one study per --out: a second one would overwrite this one's files
    sigma = DEFAULT_NOISE_SIGMA if noise is None else noise
    machine = Machine(vram_budget_mb=budget, cpu_slots=cpu_slots, noise_sigma=sigma, world=world)
    # on stderr (stdout may be --json): a short study spends minutes in the capacity search
    steps = study_steps(names, len(loads or rate_list or ()), searched=capacity_per_s is None)
    with load_progress(err_console, steps=steps) as progress:
        doc = run_load(
            wfs,
            names,
            machine=machine,
            duration_s=duration_s,
            seeds=seeds,
            loads=loads,
            rates=rate_list,
            arrival=arrival,
            progress=progress,
            jobs=default_jobs() if jobs is None else jobs,
            capacity_per_s=capacity_per_s,
        )
    write_json(out_dir / "load.json", doc)
    write_load_report(doc, out_dir, plot=not no_plot)
    release_folder(out_dir)  # the study is over: its lock file goes
    emit(doc, load_markdown(doc, None), json_out=json_out, json_file=json_file, markdown=True)


def _mix(workflows: list[str], noise: float | None, world: str | None) -> tuple[list, str]:
    """The mix's workflows (each with cards the stream simulator can time) and the world to run it in:
    ``--world``, else the files' ``world:`` key."""
    from agentsched.cli.common import load_workflow_and_world, testbed_spec
    from agentsched.runtime.setup import SIM_ONLY_REMEDY, check_sim_cards
    from agentsched.testbeds.world import choose_world

    sim = testbed_spec(opt.TestbedKind.SIM, noise=noise)  # a bad --noise fails now, as in run
    with_worlds = [load_workflow_and_world(w) for w in workflows]
    wfs = [wf for wf, _ in with_worlds]
    for wf in wfs:  # user tools without cards: the stream simulator would time placeholders
        check_sim_cards(sim, wf, SIM_ONLY_REMEDY)
    return wfs, str(choose_world(world, [w for _, w in with_worlds]))


def _policy_names(policies: str | None) -> list[str]:
    """``--policies`` by registered name (an alias: a name from before the rename), else the default set."""
    from agentsched.experiments.traffic import DEFAULT_POLICIES
    from agentsched.loop.registry import DECIDER_ALIASES

    if not policies:
        return list(DEFAULT_POLICIES)
    return [DECIDER_ALIASES.get(p.strip(), p.strip()) for p in policies.split(",") if p.strip()]


def _shared_budget_mb(wfs: list, vram_budget_mb: float | None) -> float | None:
    """The machine's VRAM budget: ``--vram-budget-mb``, else the largest the workflows name (None:
    none). A budget no tool of a workflow fits is refused in one line, as serve refuses it."""
    problem = vram_budget_problem(vram_budget_mb)  # the budget's one rule (model/budget.py)
    if problem is not None:
        raise AgentschedError(f"--vram-budget-mb {problem}")
    budget = vram_budget_mb
    if budget is None:
        named = [wf.vram_budget_mb for wf in wfs if wf.vram_budget_mb is not None]
        budget = max(named) if named else None
    for wf in wfs:
        try:
            wf.within_budget(budget)
        except AgentschedError as e:
            raise AgentschedError(f"--vram-budget-mb: {e}" if vram_budget_mb is not None else str(e)) from None
    return budget


def register(app: typer.Typer) -> None:
    app.command("load")(load_cmd)
