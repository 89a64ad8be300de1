"""Commands: invoke (run a workflow once through the learning runtime), history (what a store holds)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from agentsched.cli import options as o
from agentsched.cli.common import console, testbed_spec
from agentsched.cli.policy_opts import PolicyFlags, llm_given, policy_options
from agentsched.errors import AgentschedError

MAX_INPUT_DEPTH = 100  # nesting levels of an --input-json value


def _nested_deeper(doc: Any, limit: int) -> bool:
    """Whether lists/objects in ``doc`` nest more than ``limit`` levels (iterative: no recursion)."""
    stack = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return False


def parse_inputs(items: list[str], json_file: Path | None) -> dict[str, Any]:
    """--input-json FILE (a JSON object) and --input NAME=VALUE items (text values), each name once."""
    inputs: dict[str, Any] = {}
    if json_file is not None:
        from agentsched.model.files import read_small_text

        try:
            doc = json.loads(read_small_text(json_file, "--input-json file"))
        except ValueError as e:  # not a file / too large / not UTF-8 / invalid JSON
            msg = f"invalid JSON at line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else str(e)
            raise AgentschedError(
                f"--input-json {json_file}: {msg}" if isinstance(e, json.JSONDecodeError) else msg
            ) from None
        except RecursionError:  # json's parser recurses per nesting level
            raise AgentschedError(f"--input-json {json_file}: nested deeper than {MAX_INPUT_DEPTH} levels") from None
        if _nested_deeper(doc, MAX_INPUT_DEPTH):  # later steps (JSON output, Ray) recurse too
            raise AgentschedError(f"--input-json {json_file}: nested deeper than {MAX_INPUT_DEPTH} levels")
        if not isinstance(doc, dict):
            raise AgentschedError(f"--input-json {json_file}: expected a JSON object of NAME: VALUE")
        inputs.update(doc)
    seen: set[str] = set()
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise AgentschedError(f"--input {item!r} is not NAME=VALUE")
        if name.strip() in seen:  # keeping only the last would drop a value silently
            raise AgentschedError(f"--input {name.strip()!r} is given more than once (give each input once)")
        if name.strip() in inputs:  # the same: --input would win over the file, silently
            raise AgentschedError(
                f"--input {name.strip()!r} is given by --input-json {json_file} too (give each input once)"
            )
        seen.add(name.strip())
        inputs[name.strip()] = value
    return inputs


def _json_value(value: Any) -> tuple[bool, Any]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


def _shown(value: Any, limit: int = 300) -> str:
    ok, _ = _json_value(value)
    text = json.dumps(value) if ok else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.1f}"


WARM_UP_NOTE = (
    "note: the first invocation of a process is each tool's first call: its E2E includes one-time "
    "warm-up (torch's lazy initialisation, kernel selection); invocations after it in one process "
    "(--inputs-jsonl, serve) run warm"
)


def _spelled(mode: Any) -> str:
    """A mode as the service's API and the store write it (gpu_now in a binary space too: one spelling)."""
    return mode.value


def _mapping_text(space_label: Any, task_ids: list[str], mapping: dict[str, Any]) -> str:
    return ",".join(f"{t}={space_label(mapping[t])}" for t in task_ids if t in mapping)


# invoke's own options (cli/options.py holds those several commands share); each names its flag,
# which tests/cli/test_options.py's scan reads
WORKFLOW_ARG = typer.Argument(..., help="workflow file (tools by name or package.module:Class)")
# invoke creates the store it is pointed at (history and `store` read an existing one)
INVOKE_STORE = o.variant(
    o.STORE,
    default=None,
    help=f"the runtime's SQLite store (created when missing; default: {o.STORE.default}, said when created)",
)
# an online policy: it learns the placement across invocations
INVOKE_POLICY = o.variant(o.POLICY, help=f"online policy that learns the placement ({o.POLICY_DEFAULT_HELP})")
EXPLORE_FRACTION = typer.Option(0.1, "--explore-fraction", help="share of invocations the monitor's what-ifs may take")
# an invocation runs the real tools by default: sim needs profiled cards
INVOKE_TESTBED = o.variant(
    o.TESTBED,
    default=o.TestbedKind.LOCAL,
    help="local (real tools, default), ray (real tools on a Ray cluster) or sim",
)
# a pinned run beside the learner (no -m here)
INVOKE_MAPPING = o.variant(o.MAPPING, help="run under A=cpu,B=gpu_now,... (pinned: kept outside the learner)")


def invoke_cmd(
    workflow: str = WORKFLOW_ARG,
    input_: list[str] | None = o.INPUT,
    input_json: Path | None = o.INPUT_JSON,
    store: Path | None = INVOKE_STORE,
    policy: str | None = INVOKE_POLICY,
    policy_option: list[str] | None = o.POLICY_OPTION,
    json_out: bool = o.JSON,
    round_size: int = o.ROUND_SIZE,
    explore_fraction: float = EXPLORE_FRACTION,
    seed: int = o.SEED,
    testbed: o.TestbedKind = INVOKE_TESTBED,
    size: o.Size = o.SIZE,
    cpu_slots: int | None = o.CPU_SLOTS,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    ray_address: str | None = o.RAY_ADDRESS,
    emulate_gpu: bool = o.EMULATE_GPU,
    cards: str | None = o.CARDS,
    inputs_jsonl: Path | None = o.INPUTS_JSONL,
    mapping: str | None = INVOKE_MAPPING,
    llm_base_url: str | None = o.LLM_BASE_URL,
    llm_model: str | None = o.LLM_MODEL,
    llm_api_key: str | None = o.LLM_API_KEY,
    llm_temperature: float | None = o.LLM_TEMPERATURE,
    llm_timeout: float | None = o.LLM_TIMEOUT,
    llm_max_tokens: int | None = o.LLM_MAX_TOKENS,
    llm_predictions: bool | None = o.LLM_PREDICTIONS,
) -> None:
    """Run a workflow once on the given inputs; the store keeps it, and the placement is learned
    across invocations. Prints the sinks' outputs, the mapping and the E2E."""
    from agentsched.cli import invoke_batch
    from agentsched.loop.registry import default_policy, get_spec
    from agentsched.runtime.inputs import check_input_names
    from agentsched.scenarios import resolve_workflow_and_world

    if inputs_jsonl is not None and (input_ or input_json is not None):
        raise AgentschedError("--inputs-jsonl replaces --input/--input-json: give one or the other")
    lines = invoke_batch.read_inputs_jsonl(inputs_jsonl) if inputs_jsonl is not None else None
    inputs = parse_inputs(list(input_ or []), input_json)
    wf, wf_world = resolve_workflow_and_world(workflow)
    check_input_names(wf, inputs)
    spec = testbed_spec(
        testbed,
        size=size,
        cpu_slots=cpu_slots,
        from_workflows=[wf_world],
        task_timeout_s=task_timeout_s,
        ray_address=ray_address,
        emulate_gpu=emulate_gpu,
    )
    name = get_spec(policy).name.value if policy is not None else default_policy(wf.with_cards(cards) if cards else wf)
    llm = llm_given(
        base_url=llm_base_url,
        model=llm_model,
        api_key=llm_api_key,
        temperature=llm_temperature,
        timeout_s=llm_timeout,
        max_tokens=llm_max_tokens,
    )
    flags = PolicyFlags(llm=llm, predictions=llm_predictions, items=tuple(policy_option or ()))
    runtime_args = {
        "policy": name,
        "testbed": spec,
        "round_size": round_size,
        "explore_fraction": explore_fraction,
        "seed": seed,
        "cards": cards,
        "policy_options": policy_options([name], flags, single=True).get(name, {}),
    }
    _invoke(wf, store, runtime_args, mapping, lines, inputs, json_out)


def _invoke(
    wf: Any,
    store: Path | None,
    runtime_args: dict[str, Any],
    mapping: str | None,
    lines: list[tuple[int, dict[str, Any]]] | None,
    inputs: dict[str, Any],
    json_out: bool,
) -> None:
    """Open the runtime (``Runtime(wf, store=store, **runtime_args)``) and run one invocation on
    ``inputs``, or every --inputs-jsonl line; a failed invocation is stored, and its failure is the
    exit status."""
    from agentsched.cli import invoke_batch
    from agentsched.runtime import Runtime

    created = store is None and not Path(o.STORE.default).exists()  # a store the user did not name
    store = Path(o.STORE.default) if store is None else store
    with Runtime(wf, store=store, on_store_wait=lambda msg: typer.echo(msg, err=True), **runtime_args) as rt:
        if created:  # never silently: a file appears in the current folder
            typer.echo(f"created store {store} (it keeps what invoke learns; --store chooses another)", err=True)
        if mapping is not None:
            invoke_batch.pin_mapping(rt, mapping)
        if lines is not None:
            if invoke_batch.run_jsonl(rt, lines):  # every line is stored; failures are the exit status
                raise SystemExit(1)
            return
        res = rt.invoke(**inputs)
    _print_invocation(wf, rt, res, json_out)
    if not res.ok:  # the invocation is stored; its failure is the exit status
        raise SystemExit(1)


def _kept(res: Any) -> str:
    return (
        f"invocation {res.invocation_id} is stored"
        if res.invocation_id is not None
        else "its record waits for the store"
    )


def _print_invocation(wf: Any, rt: Any, res: Any, json_out: bool) -> None:
    mapping = _mapping_text(_spelled, wf.task_ids, res.mapping)
    from agentsched.testbeds.real import NO_CUDA_NOTE

    note = f"note: {NO_CUDA_NOTE}" if rt.host_only else None  # said once, as `run` says it
    if json_out:
        outputs = {}
        for task, value in res.outputs.items():
            ok, v = _json_value(value)
            if not ok:
                raise AgentschedError(
                    f"output of task {task} ({type(value).__name__}) cannot be written as "
                    f"JSON ({_kept(res)}): drop --json, or "
                    "return JSON data from the sink tool"
                )
            outputs[task] = v
        doc = {
            "workflow": wf.name,
            "invocation_id": res.invocation_id,
            "kind": res.kind,
            "round": res.round,
            "status": res.status.value,
            "message": res.message,
            "mapping": {t: m.value for t, m in res.mapping.items()},
            "e2e_ms": res.e2e_ms,
            "outputs": outputs,
            "timeline": list(res.timeline),
        }
        if note:
            typer.echo(note, err=True)  # stdout holds the JSON alone
        typer.echo(json.dumps(doc, indent=2))
    else:
        what = (
            "a what-if probe"
            if res.kind == "probe"
            else "the round's mapping"
            if res.round is not None
            else f"{res.kind}, outside the rounds"
        )
        where = f"round {res.round}" if res.round is not None else "no round"
        ident = res.invocation_id if res.invocation_id is not None else "(its record waits for the store)"
        console.print(
            f"{wf.name}: invocation {ident}, {where} ({what}): "
            f"{res.status.value}" + (f" ({res.message})" if res.message else ""),
            soft_wrap=True,
        )  # one line, however long the message
        console.print(f"mapping: {mapping}")
        console.print(f"E2E: {_fmt_ms(res.e2e_ms)} ms")
        if note:
            typer.echo(note)
        if rt.testbed.name != "sim":  # a real tool's first call pays one-time work a warm process does not
            typer.echo(WARM_UP_NOTE)
        for task, value in res.outputs.items():
            typer.echo(f"output {task}: {_shown(value)}")  # never wrapped: one line per output


def history_cmd(
    workflow: str = typer.Argument(..., help="workflow name or file"),
    store: Path = o.STORE,
    json_out: bool = o.JSON,
    plot: Path | None = typer.Option(None, "--plot", help="write the learning curve to this file (.png, .svg or .pdf)"),
    forget: int | None = typer.Option(
        None,
        "--forget",
        metavar="LEARNER",
        help="delete this learner's history (its number as history shows "
        "it): the next runtime with its settings starts afresh",
    ),
    best: bool = typer.Option(False, "--best", help="only each learner's best round: its mapping and median E2E"),
) -> None:
    """Show every round and invocation a store holds for a workflow, and the learning curve."""
    from agentsched.cli.output import check_output_file
    from agentsched.store import Store

    name = _workflow_name(workflow)
    if forget is not None:
        return _forget(store, name, forget)
    if plot is not None:  # the path and format are checked before the store is read
        from agentsched.report.gantt import check_figure_path

        check_figure_path(plot, "--plot")
        check_output_file(plot, "--plot")
    st = Store(store, read_only=True)
    try:
        learners = st.learners(name)
        if not learners:
            raise AgentschedError(f"store {store} holds no invocation of workflow {name!r}")
        if best:
            from agentsched.cli.invoke_batch import best_docs, print_best

            print_best(name, best_docs(st, learners), json_out)
            return
        doc = [_learner_doc(st, ln) for ln in learners]
    finally:
        st.close()
    if json_out:
        typer.echo(json.dumps({"workflow": name, "store": str(store), "learners": doc}, indent=2))
    else:
        for d in doc:
            _print_learner(d)
    if plot is not None and not any(d["rounds"] for d in doc):  # an empty chart would look like a bug
        rounds = ", ".join(sorted({str(d["settings"].get("round_size", "?")) for d in doc}))
        (typer.echo if not json_out else lambda m: typer.echo(m, err=True))(
            f"no learning curve written: no round of {name} has completed yet (a round is {rounds} invocations)"
        )
    elif plot is not None:
        from agentsched.report.history_plot import plot_learning_curve

        series = {f"{d['policy']} #{d['learner']}": [(r["round"], r["e2e_ms"]) for r in d["rounds"]] for d in doc}
        plot_learning_curve(series, plot, f"{name}: learning curve")
        if not json_out:
            console.print(f"learning curve written to {plot}")


def _forget(store: Path, name: str, learner: int) -> None:
    from agentsched.cli.common import existing_store
    from agentsched.store import Store

    existing_store(store)
    st = Store(store)
    try:
        if learner not in [ln.id for ln in st.learners(name)]:
            raise AgentschedError(f"store {store} has no learner {learner} of workflow {name!r}")
        gone = st.forget(learner)
    finally:
        st.close()
    console.print(f"forgot learner {learner} of {name} ({gone} invocations) in {store}", highlight=False)


def _workflow_name(text: str) -> str:
    p = Path(text)
    if p.suffix in (".yaml", ".yml", ".json") or p.is_file():
        from agentsched.model.tool import without_tool_imports
        from agentsched.scenarios import resolve_workflow

        with without_tool_imports():  # its name only: reading a store never runs the user's tool modules
            return resolve_workflow(text).name
    return text


def _learner_doc(st: Any, ln: Any) -> dict[str, Any]:
    rounds = st.rounds(ln.id)
    execs = st.executions(ln.id)
    best, curve = None, []
    for r in rounds:
        if r.e2e_ms is not None:
            best = r.e2e_ms if best is None else min(best, r.e2e_ms)
        curve.append(best)
    wdoc = st.workflow_doc(ln.workflow_hash) or {}
    return {
        "learner": ln.id,
        "policy": ln.policy,
        "settings": ln.settings,
        "workflow_hash": ln.workflow_hash,
        "card_hash": ln.card_hash,
        "task_ids": list((wdoc.get("tasks") or {}).keys()),
        "decision_space": wdoc.get("decision_space", "three_way"),
        "invocations": len(execs),
        "probes": sum(1 for e in execs if e.kind == "probe"),
        "rounds": [
            {
                "round": r.round,
                "mapping": r.mapping,
                "status": r.status,
                "e2e_ms": r.e2e_ms,
                "best_so_far_ms": b,
                "executions_after": r.executions_after,
                "reason": r.reason,
            }
            for r, b in zip(rounds, curve, strict=True)
        ],
        "executions": [
            {
                "invocation_id": e.id,
                "seq": e.seq,
                "kind": e.kind,
                "round": e.round,
                "mapping": e.mapping,
                "status": e.status,
                "e2e_ms": e.e2e_ms,
                "message": e.message,
            }
            for e in execs
        ],
    }


def _print_learner(d: dict[str, Any]) -> None:
    from agentsched.model.text import plural

    ids = d["task_ids"]

    def fmt(m: dict[str, str]) -> str:
        from agentsched.model.workflow import Mode

        return ",".join(f"{t}={_spelled(Mode(m[t]))}" for t in ids if t in m)

    s = d["settings"]
    console.print(
        f"learner {d['learner']}: policy {d['policy']}, round size {s.get('round_size')}, explore "
        f"fraction {s.get('explore_fraction')}, testbed {s.get('testbed')}: "
        f"{plural(d['invocations'], 'invocation')} ({plural(d['probes'], 'probe')}), "
        f"{plural(len(d['rounds']), 'round')} observed"
    )
    t = Table(title="rounds (learning curve: best so far)")
    for col in ("round", "mapping", "status", "median E2E ms", "best so far ms", "invocations after"):
        t.add_column(col, justify="left" if col in ("mapping", "status") else "right")
    for r in d["rounds"]:
        t.add_row(
            str(r["round"]),
            fmt(r["mapping"]),
            r["status"],
            _fmt_ms(r["e2e_ms"]),
            _fmt_ms(r["best_so_far_ms"]),
            str(r["executions_after"]),
        )
    console.print(t)
    t = Table(title="invocations")
    for col in ("id", "kind", "round", "mapping", "status", "E2E ms", "message"):
        t.add_column(col, justify="right" if col in ("id", "round", "E2E ms") else "left")
    for e in d["executions"]:
        kind = e["kind"] + ("" if e["seq"] is not None else " (outside the sequence)")
        t.add_row(
            str(e["invocation_id"]),
            kind,
            "-" if e["round"] is None else str(e["round"]),
            fmt(e["mapping"]),
            e["status"],
            _fmt_ms(e["e2e_ms"]),
            e["message"],
        )
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("invoke")(invoke_cmd)
    app.command("history")(history_cmd)
