"""Commands: run (one policy in the closed loop against the oracle), policies (what is registered)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from agentsched.cli import options as o
from agentsched.cli.common import (
    console,
    err_console,
    fmt_ms,
    load_workflow_and_world,
    loop_counts,
    policy_preflight,
    preflight,
    print_json,
    testbed_notes,
    testbed_spec,
)
from agentsched.cli.output import check_output_file, write_json
from agentsched.cli.policy_opts import PolicyFlags, llm_given, policy_options
from agentsched.errors import AgentschedError, TestbedError, ToolError
from agentsched.model.mapping import format_mapping
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.policies.base import Policy
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.real import NO_CUDA_NOTE, host_only_workflow
from agentsched.testbeds.spec import TestbedSpec

SUMMARY_PRINT_MAX_LINES = 40  # evidence lines printed per round (one per task on a large workflow)
MAPPING_PRINT_MAX_TASKS = 16  # beyond this a round line shows mode counts (the JSON keeps every task)
# run's own option (cli/options.py holds those several commands share)
ORACLE = typer.Option(True, "--oracle/--no-oracle", help="compare with the brute-force oracle (noise-free on sim)")


def mapping_text(wf: Workflow, mapping: Any) -> str:
    """``A=gpu,B=cpu`` for a small workflow; ``5000 tasks: 3,120 gpu, 1,880 cpu`` for a large one."""
    if len(wf.tasks) <= MAPPING_PRINT_MAX_TASKS:
        return format_mapping(wf, mapping)
    sp = wf.decision_space
    counts = {m: 0 for m in sp.modes}
    for m in mapping.values():
        counts[m] += 1
    return f"{len(wf.tasks):,} tasks: " + ", ".join(f"{n:,} {sp.label(m)}" for m, n in counts.items() if n)


def _say(json_out: bool) -> Any:
    return err_console if json_out else console  # with --json, stdout holds the JSON only


def _line(say: Any, text: str) -> None:
    say.print(text, highlight=False, markup=False, soft_wrap=True)


def _round_printer(wf: Workflow, say: Any) -> Any:
    """The on_round callback: one line per round, then up to SUMMARY_PRINT_MAX_LINES evidence lines."""
    width = len(mapping_text(wf, {t: wf.decision_space.modes[-1] for t in wf.task_ids}))

    def show(rec: Any) -> None:
        r = rec.result
        status = r.status.value + (f" ({r.message})" if r.message else "")
        _line(
            say,
            f"R{r.round:<3d} {mapping_text(wf, r.mapping):<{width}s}  E2E {fmt_ms(r.e2e_ms):>10s} ms"
            f"  {status}  executions {rec.executions_after}"
            + (f" ({plural(len(rec.probes), 'probe')})" if rec.probes else ""),
        )
        summary = (rec.evidence or {}).get("summary") if isinstance(rec.evidence, dict) else None
        summary = list(summary or [])
        for line in summary[:SUMMARY_PRINT_MAX_LINES]:
            _line(say, f"      {line}")
        if len(summary) > SUMMARY_PRINT_MAX_LINES:
            more = len(summary) - SUMMARY_PRINT_MAX_LINES
            _line(say, f"      ... {more:,} more line{'s' if more != 1 else ''} (all in --json / --json-out)")

    return show


def _oracle(wf: Workflow, tb: Testbed, name: str, repeats: int, want: bool, say: Any) -> Any:
    """The reference oracle of the run (None: not asked for, or not computable and not needed)."""
    from agentsched.loop.runner import reference_oracle

    if not (want or name == "oracle"):
        return None
    try:
        return reference_oracle(wf, tb, repeats=repeats)
    except TestbedError:
        raise  # the testbed cannot run this: the loop could not either
    except AgentschedError as e:
        if name == "oracle":
            raise
        _line(say, f"note: {e}; running without it")
        return None


def _print_outcome(wf: Workflow, run: Any, view: Any, metrics: Any, simulated: bool, say: Any) -> None:
    best = run.best_round()
    if best is None:
        _line(say, "best: no feasible round")
    else:
        ratio = f", {metrics.best_ratio:.3f}x oracle" if metrics and metrics.best_ratio else ""
        _line(say, f"best:   R{best.round} {mapping_text(wf, best.mapping)}  E2E {fmt_ms(best.e2e_ms)} ms{ratio}")
    if view is None or metrics is None:
        return
    _line(
        say,
        f"oracle: {mapping_text(wf, view.best)}  E2E {fmt_ms(view.e2e_ms)} ms{' (noise-free)' if simulated else ''}",
    )
    first = "never" if metrics.first_equivalent_round is None else f"R{metrics.first_equivalent_round}"
    # an execution that fails at once costs ~0 ms: a never-feasible run's regret means nothing
    regret = "n/a (never feasible)" if metrics.best_ratio is None else f"{round(metrics.regret, 3) + 0.0:.3f}"
    _line(
        say,
        f"match {metrics.best_match}/{metrics.tasks}, first oracle-equivalent round {first}, "
        f"executions {metrics.executions} ({plural(metrics.probes, 'probe')}, "
        f"{metrics.infeasible_executions} infeasible), regret {regret}",
    )


def _execute(
    wf: Workflow, pol: Policy, name: str, tb: Testbed, *, rounds: int, repeats: int, seed: int, oracle: bool, say: Any
) -> tuple[Any, Any, Policy]:
    """Preflight, the oracle, then the loop: (run, oracle result or None, the policy that ran)."""
    from agentsched.loop.registry import make_policy
    from agentsched.loop.runner import run_loop

    preflight(tb, [wf])  # e.g. a GPU placement the testbed cannot run: one line, before any run
    res = _oracle(wf, tb, name, repeats, oracle, say)
    if res is not None and name == "oracle":
        pol.close()
        pol = make_policy("oracle", oracle=res)
    sp = wf.decision_space
    budget = "none" if wf.vram_budget_mb is None else f"{wf.vram_budget_mb:g} MB"
    _line(
        say,
        f"{wf.name} ({sp.value}, budget {budget}), policy {pol.label}"
        f"{'' if pol.online else ' (offline reference)'}, {plural(rounds, 'round')} x "
        f"{plural(repeats, 'execution')}, seed {seed}",
    )
    for n in testbed_notes(tb):
        console.print(f"note: {n}", highlight=False, markup=False)
    run = run_loop(wf, pol, tb, rounds=rounds, repeats=repeats, seed=seed, on_round=_round_printer(wf, say))
    return run, res, pol


def run_cmd(
    workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
    policy: str | None = o.POLICY,
    rounds: int = o.ROUNDS,
    repeats: int = o.REPEATS,
    seed: int = o.SEED,
    json_out: bool = o.JSON_TEXT_ON_STDERR,
    json_file: Path | None = o.JSON_OUT,
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
    oracle: bool = ORACLE,
    llm_base_url: str | None = o.LLM_BASE_URL,
    llm_model: str | None = o.LLM_MODEL,
    llm_api_key: str | None = o.LLM_API_KEY,
    llm_temperature: float | None = o.LLM_TEMPERATURE,
    llm_timeout: float | None = o.LLM_TIMEOUT,
    llm_max_tokens: int | None = o.LLM_MAX_TOKENS,
    llm_predictions: bool | None = o.LLM_PREDICTIONS,
) -> None:
    """Run one policy in the closed loop and compare its best mapping with the oracle."""
    from agentsched.loop.registry import default_policy, get_spec

    loop_counts(rounds=rounds, repeats=repeats)
    say = _say(json_out)
    wf, wf_world = load_workflow_and_world(workflow, cards)
    name = get_spec(policy).name.value if policy is not None else default_policy(wf)
    spec = testbed_spec(
        testbed,
        seed=seed,
        noise=noise,
        size=size,
        cpu_slots=cpu_slots,
        world=world,
        from_workflows=[wf_world],
        ray_address=ray_address,
        emulate_gpu=emulate_gpu,
        task_timeout_s=task_timeout_s,
    )
    _check_workflow(spec, wf, say)
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
    pol = _make_policy(name, wf, flags)
    if json_file is not None:
        check_output_file(json_file, "--json-out")  # before the work, not after it
    tb, wf, notes = _testbed_for(spec, pol, wf, say)
    try:
        run, res, pol = _execute(wf, pol, name, tb, rounds=rounds, repeats=repeats, seed=seed, oracle=oracle, say=say)
    finally:
        try:
            pol.close()
        finally:
            tb.close()
    outcome = _Outcome(wf, name, pol, seed, {"name": tb.name, "notes": notes}, run, res, spec.simulated)
    _report(outcome, json_out, json_file, say)


def _check_workflow(spec: TestbedSpec, wf: Workflow, say: Any) -> None:
    """The simulator needs every tool's card; a real testbed runs the tools, which may want inputs."""
    from agentsched.runtime.inputs import check_needs_no_inputs
    from agentsched.runtime.setup import check_sim_cards

    check_sim_cards(spec, wf)  # user tools without cards: the simulator would report placeholder times
    if not spec.simulated:  # (the simulator never calls the tools)
        try:  # a note, not a refusal: a tool may do without what it names (inputs.get(...))
            check_needs_no_inputs(wf, "run")
        except ToolError as e:
            _line(say, f"note: {e}")


def _make_policy(name: str, wf: Workflow, flags: PolicyFlags) -> Policy:
    """Policy ``name`` built with the options the flags give it (a cold start's where it has no card)."""
    from agentsched.loop.registry import make_policy
    from agentsched.runtime.setup import cold_start_options

    opts = policy_options([name], flags, single=True).get(name) or {}
    # (the oracle measures every mapping on the testbed: no card needed, as --oracle needs none)
    return make_policy(name, **(opts if name == "oracle" else cold_start_options(name, wf, opts)))


def _testbed_for(spec: TestbedSpec, pol: Policy, wf: Workflow, say: Any) -> tuple[Testbed, Workflow, list[str]]:
    """The testbed built once the policy passed its preflight (closing the policy when either fails);
    the workflow as it runs there (host code where there is no CUDA) and the testbed's notes."""
    try:
        policy_preflight(pol, [wf])  # an unusable LLM endpoint: one line now, not a fallback in every round
        tb = spec.build()
    except BaseException:
        pol.close()
        raise
    notes = testbed_notes(tb)
    if tb.host_only(wf):  # as invoke does: GPU placements run as host code, said once
        wf = host_only_workflow(wf)
        notes.append(NO_CUDA_NOTE)
        _line(say, f"note: {NO_CUDA_NOTE}")
    return tb, wf, notes


@dataclass(frozen=True)
class _Outcome:
    """What one run of the loop produced, for its report."""

    wf: Workflow
    name: str  # the policy's registry name
    pol: Policy  # the policy that ran
    seed: int
    testbed: dict[str, Any]  # the testbed's name and notes
    run: Any
    oracle: Any  # the reference oracle's result, or None
    simulated: bool


def _report(out: _Outcome, json_out: bool, json_file: Path | None, say: Any) -> None:
    """The outcome lines against the oracle; the run's JSON document to --json-out and/or stdout."""
    from agentsched.experiments.results import run_document
    from agentsched.loop.metrics import oracle_view, run_metrics

    view = oracle_view(out.wf, out.oracle) if out.oracle is not None else None
    metrics = run_metrics(out.run, view) if view is not None else None
    _print_outcome(out.wf, out.run, view, metrics, out.simulated, say)
    if json_file is not None or json_out:
        doc = run_document(out.wf, out.name, out.pol, out.seed, out.testbed, out.run, view, metrics)
        if json_file is not None:
            write_json(json_file, doc)
            _line(say, f"rounds written to {json_file}")
        if json_out:
            print_json(doc)


def policies_cmd(json_out: bool = o.JSON) -> None:
    """List the registered policies and the options each takes (set them with --policy-option KEY=VALUE), and
    the shared machine's deciders with theirs."""
    from agentsched.loop.registry import DECIDERS, REGISTRY, decider_options, is_available, option_defaults

    rows = []
    for name, spec in REGISTRY.items():
        kind = "offline reference" if not spec.online else ("baseline" if spec.baseline else "agent")
        available = is_available(name)
        opts = option_defaults(name) if available else {}
        rows.append(
            {
                "name": name,
                "kind": kind,
                "installed": available,
                "options": {k: _option_value(v) for k, v in opts.items()},
                "description": spec.summary,
            }
        )
    for name, dspec in DECIDERS.items():  # the shared machine's deciders (agentsched load, serve --placement live)
        rows.append(
            {
                "name": name,
                "kind": "decider",
                "installed": True,
                "description": dspec.summary,
                "options": {k: _option_value(v) for k, v in decider_options(name).items()},
            }
        )
    if json_out:
        print_json({"policies": rows})
        return
    t = Table(title="Policies")
    for col in ("name", "kind", "options (default)", "description"):
        t.add_column(col)
    for r in rows:
        kind = r["kind"] + ("" if r["installed"] or r["kind"] != "agent" else " (not installed)")
        t.add_row(
            r["name"], kind, ", ".join(f"{k}={_shown(v)}" for k, v in r["options"].items()) or "-", r["description"]
        )
    console.print(t)


def _option_value(value: Any) -> Any:
    """A default as JSON data (an enum as its value; anything else JSON cannot hold as its text)."""
    import json

    value = getattr(value, "value", value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    return str(getattr(value, "value", value))


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("policies")(policies_cmd)
