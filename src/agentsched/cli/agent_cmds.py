"""Commands of the agentic scheduler: ablation (Table 6), agent-check (oracle-equivalence of
agent-rules on the built-in scenarios), prompt (print a round-0 prompt), llm-serve (a local GGUF
model behind an OpenAI-compatible endpoint)."""

from __future__ import annotations

from typing import Any

import typer

from agentsched.cli import options as o
from agentsched.cli.common import (
    console,
    err_console,
    load_workflow,
    load_workflow_and_world,
    loop_counts,
    testbed_spec,
)
from agentsched.cli.options import WORLD, InitialRule, StartKind
from agentsched.cli.output import check_output_file, emit
from agentsched.errors import AgentschedError
from agentsched.model.options import INITIALS, STARTS

# one agent run per seed: one start, warm unless asked (the shared --start's None means "the policy's own")
START_ONE = o.variant(
    o.START, default=StartKind.WARM, help="warm (profile cards) or cold (tool names, tags and workload lines only)"
)

# ablation's own options
JOURNAL = typer.Option(None, "--journal", help="record each finished run in this file (SQLite) as it completes")
RESUME = typer.Option(False, "--resume", help="continue the interrupted ablation of --journal")


def _baselines(values: list[str]) -> tuple[str, ...]:
    """The --baseline values as registry names ("none" drops them all); one-line error for a name
    that is not a baseline policy."""
    from agentsched.loop.registry import baseline_policies, get_spec

    valid = baseline_policies()
    out: list[str] = []
    for value in values:
        name = value.strip()
        if not name or name == "none":
            continue
        if name.lower() not in valid:
            raise AgentschedError(f"--baseline {name} is not a baseline policy (valid: {', '.join(valid)}, none)")
        name = get_spec(name).name.value
        if name not in out:
            out.append(name)
    return tuple(out)


def ablation_cmd(
    workflow: str = typer.Argument("S13", help="scenario name or workflow file (the paper uses S13)"),
    rounds: int = o.ROUNDS,
    repeats: int = o.REPEATS,
    seeds: int = o.variant(o.SEEDS, help="runs per variant, seeds 0..N-1"),  # ablation compares variants, not policies
    start: StartKind = START_ONE,
    initial: InitialRule | None = o.INITIAL,
    cards: str | None = o.CARDS,
    world: str | None = WORLD,
    json_out: bool = o.JSON,
    json_file: str | None = o.JSON_OUT,
    journal_file: str | None = JOURNAL,
    resume: bool = RESUME,
) -> None:
    """The monitor ablation (paper Table 6): full; w/o cpu-to-queue reprobe; w/o swap; w/o hints; no monitor."""
    from agentsched.experiments.ablation import run_ablation

    loop_counts(rounds=rounds, repeats=repeats, seeds=seeds)
    wf, wf_world = load_workflow_and_world(workflow, cards)
    spec = testbed_spec(o.TestbedKind.SIM, world=world, from_workflows=[wf_world])  # the ablation runs on the simulator
    from agentsched.runtime.setup import check_sim_cards

    check_sim_cards(spec, wf, "pass --cards cards.json (the ablation runs on the simulator)")
    if json_file:
        check_output_file(json_file, "--json-out")  # before the work, not after it
    from agentsched.experiments.paper import is_paper_scenario

    if resume and journal_file is None:
        raise AgentschedError("--resume needs --journal FILE (where the interrupted ablation recorded its runs)")
    initials = INITIALS if initial is None else (initial.value,)
    run = {"rounds": rounds, "repeats": repeats, "seeds": seeds, "start": start.value, "initial": list(initials)}
    journal = _journal(journal_file, resume, wf, spec, cards, run) if journal_file is not None else None
    try:
        res = run_ablation(
            wf,
            rounds=rounds,
            repeats=repeats,
            seeds=tuple(range(seeds)),
            start=start.value,
            initial=initials,
            paper=wf.name == "S13" and is_paper_scenario(wf, cards),
            journal=journal,
            testbed=spec,
        )
        if journal is not None and journal.resumed:  # on stderr: stdout may be --json
            err_console.print(
                f"resumed: {journal.resumed} finished runs taken from {journal_file}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        emit(res.to_dict(), res.to_markdown(), json_out=json_out, json_file=json_file)
        if journal is not None:
            journal.finish()  # after the output: an ablation whose --json-out could not be written stays resumable
    except KeyboardInterrupt:
        if journal is not None:
            err_console.print(
                f"the finished runs are kept in {journal_file}: continue with --resume",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        raise
    finally:
        if journal is not None:
            journal.close()


def _journal(path: str, resume: bool, wf: Any, spec: Any, cards: str | None, run: dict[str, Any]) -> Any:
    """The ablation's run journal at ``path``, keyed by what it runs (``run``: its loop counts, start
    and initial rules); ``resume``: an interrupted one continued."""
    from agentsched.experiments.journal import RunJournal

    check_output_file(path, "--journal")
    key = {"workflow": wf.name, "tasks": wf.task_ids, **run, "cards": cards, "world": spec.world_name}
    return RunJournal(path, key, resume=resume)


def agent_check_cmd(
    scenarios: list[str] | None = typer.Argument(None, help="scenarios or workflow files (default: S1..S13)"),
    rounds: int = o.ROUNDS,
    repeats: int = o.REPEATS,
    seeds: int = o.variant(o.SEEDS, default=3),  # fewer: a check runs every scenario, both starts and baselines
    start: StartKind | None = o.variant(o.START, help="warm or cold (default: both)"),  # None: both compared
    baseline: list[str] = typer.Option(["ucb1"], "--baseline", help="baseline policies to run beside (repeatable)"),
    world: str | None = WORLD,
    json_out: bool = o.JSON,
    json_file: str | None = o.JSON_OUT,
) -> None:
    """Does agent-rules reach an oracle-equivalent mapping? First round, executions, baselines, paper."""
    from agentsched.experiments.check import run_check
    from agentsched.scenarios import list_scenarios

    loop_counts(rounds=rounds, repeats=repeats, seeds=seeds)
    starts = STARTS if start is None else (start.value,)
    baselines = _baselines(baseline)
    loaded = [load_workflow_and_world(s) for s in (scenarios or list_scenarios())]
    wfs = [wf for wf, _ in loaded]
    spec = testbed_spec(o.TestbedKind.SIM, world=world, from_workflows=[w for _, w in loaded])  # on the simulator
    from agentsched.runtime.setup import SIM_ONLY_REMEDY, check_sim_cards

    for wf in wfs:
        check_sim_cards(spec, wf, SIM_ONLY_REMEDY)
    if json_file:
        check_output_file(json_file, "--json-out")  # before the work, not after it
    res = run_check(
        wfs,
        starts=starts,
        seeds=tuple(range(seeds)),
        rounds=rounds,
        repeats=repeats,
        baselines=baselines,
        world=spec.world,
    )
    emit(res.to_dict(), res.to_markdown(), json_out=json_out, json_file=json_file)
    if not res.all_reached:
        raise typer.Exit(1)


def prompt_cmd(
    workflow: str = typer.Argument(..., help="scenario name or workflow file"),
    start: StartKind | None = o.variant(
        o.START,
        help="warm (profile cards; the default when every task has "
        "one) or cold (tool names, tags and workload lines only)",
    ),
    rounds: int = o.variant(o.ROUNDS, help="rounds the prompt announces"),  # prompt runs none: it only states them
    cards: str | None = o.CARDS,
    predictions: bool = typer.Option(
        False,
        "--predictions/--no-predictions",
        help="with the optional model-predictions stream (agent-llm --llm-predictions)",
    ),
    json_out: bool = o.JSON,
) -> None:
    """Print the round-0 prompt the llm reasoner would send (system and user messages)."""
    import random

    from agentsched.agent.policy import AgentPolicy
    from agentsched.agent.prompt import build_prompt
    from agentsched.policies.base import PolicyContext

    loop_counts(rounds=rounds)
    wf = load_workflow(workflow, cards)

    def no_probe(_mapping: object) -> object:
        raise AgentschedError("printing a prompt executes nothing")

    # as a runtime starts an agent: cold when a task has no card (warm then refused in one line)
    if wf.unprofiled and start is StartKind.WARM:
        raise AgentschedError(f"--start warm needs cards, but task(s) {', '.join(sorted(wf.unprofiled))} have none")
    start_kind = start.value if start is not None else "cold" if wf.unprofiled else "warm"
    policy = AgentPolicy("rules", start=start_kind, predictions=predictions)
    policy.reset(
        PolicyContext(
            workflow=wf, cards=dict(wf.task_cards), rng=random.Random(0), probe=no_probe, rounds=rounds, repeats=1
        )
    )
    prompt = build_prompt(policy.view(0))
    if json_out:
        from agentsched.cli.common import print_json

        print_json(
            {
                "workflow": wf.name,
                "start": start_kind,
                "rounds": rounds,
                "version": prompt.version,
                "messages": prompt.messages(),
            }
        )
        return
    typer.echo(prompt.text())


def llm_serve_cmd(
    model: str = typer.Argument(..., help="path to a GGUF model file"),
    port: int = typer.Option(8080, help="port on 127.0.0.1"),
    n_ctx: int = typer.Option(8192, "--n-ctx", help="context length"),
    n_gpu_layers: int = typer.Option(0, "--n-gpu-layers", help="layers offloaded to a GPU (0: CPU only)"),
    chat_format: str | None = typer.Option(None, "--chat-format", help="llama.cpp chat format override"),
) -> None:
    """Serve a local GGUF model (llama-cpp-python, the local-llm extra) as an OpenAI-compatible endpoint."""
    import threading

    from agentsched.agent.local_llm import serve_gguf

    server = serve_gguf(model, port=port, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, chat_format=chat_format)
    console.print(
        f"serving {server.model} at {server.base_url} (Ctrl-C to stop); use "
        f"--llm-base-url {server.base_url} --llm-model {server.model}",
        markup=False,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def register(app: typer.Typer) -> None:
    app.command("ablation")(ablation_cmd)
    app.command("agent-check")(agent_check_cmd)
    app.command("prompt")(prompt_cmd)
    app.command("llm-serve")(llm_serve_cmd)
