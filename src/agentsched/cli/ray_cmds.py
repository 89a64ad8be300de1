"""Command: throughput (K invocations at once on the ray testbed: per-invocation E2E, invocations/s)."""

from __future__ import annotations

import enum
import statistics
from pathlib import Path
from typing import Any

import typer

from agentsched.cli import options as o
from agentsched.cli.common import console, err_console, load_workflow, positive, print_json, testbed_notes, testbed_spec
from agentsched.cli.output import check_output_file, write_json
from agentsched.errors import AgentschedError
from agentsched.model.mapping import format_mapping, parse_mapping

# throughput's one testbed, as a choice typer checks (sim and local run one invocation at a time)
RayOnly = enum.Enum("RayOnly", {"RAY": o.TestbedKind.RAY.value}, type=str)  # type: ignore[misc]

MAX_CONCURRENCY = 256  # far above what one driver should push through its threads
MAX_BATCHES = 1_000


# throughput's own options, and its variants of the shared ones (cli/options.py)
CONCURRENCY = typer.Option(4, "--concurrency", "-k", help="invocations running at once")
BATCHES = typer.Option(3, "--batches", help="batches of K invocations measured (after one warm-up batch)")
MAPPING = o.variant(o.MAPPING_M, help="e.g. A=cpu,B=gpu_now (default: every task on cpu)")
TESTBED = o.variant(
    o.TESTBED,
    default=RayOnly.RAY,  # type: ignore[valid-type]
    help="ray: the only testbed that runs invocations at once",
)
# ray only: the shared help's sim and local defaults do not apply
CPU_SLOTS = o.variant(o.CPU_SLOTS, help="at most this many CPU tasks at once (default: the cluster's CPUs)")
INPUT = o.variant(o.INPUT, help="NAME=VALUE given to every invocation of a user workflow (repeatable; text)")
# the lines feed K concurrent invocations in turn (not one invocation each, in one process)
INPUTS_JSONL = o.variant(
    o.INPUTS_JSONL,
    help="one JSON object of NAME: VALUE a line, one per "
    "invocation in turn (cycling when fewer; the warm-up batch takes the "
    "first)",
)


def throughput_cmd(
    workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
    concurrency: int = CONCURRENCY,
    batches: int = BATCHES,
    mapping: str | None = MAPPING,
    testbed: RayOnly = TESTBED,
    ray_address: str | None = o.RAY_ADDRESS,
    emulate_gpu: bool = o.EMULATE_GPU,
    size: o.Size = o.SIZE,
    cpu_slots: int | None = CPU_SLOTS,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    json_out: bool = o.JSON_TEXT_ON_STDERR,
    json_file: Path | None = o.JSON_OUT,
    input_: list[str] | None = INPUT,
    inputs_jsonl: Path | None = INPUTS_JSONL,
) -> None:
    """Run K invocations of one workflow at once on a Ray cluster, in batches; print each
    invocation's E2E and the throughput (ok invocations per second of wall time). Exits 1 when
    any invocation failed (warm-up included), saying how many."""
    from agentsched.model.workflow import Mode
    from agentsched.testbeds.ray import RayTestbed

    positive("--concurrency", concurrency)
    positive("--batches", batches)
    if concurrency > MAX_CONCURRENCY or batches > MAX_BATCHES:
        raise AgentschedError(f"--concurrency must be <= {MAX_CONCURRENCY} and --batches <= {MAX_BATCHES}")
    wf = load_workflow(workflow)
    lines = _batch_inputs(wf, list(input_ or []), inputs_jsonl)
    m = parse_mapping(wf, mapping) if mapping else {t: Mode.CPU for t in wf.task_ids}
    if json_file is not None:
        check_output_file(json_file, "--json-out")  # before the work, not after it
    say = err_console if json_out else console  # with --json, stdout holds the JSON only
    tb = testbed_spec(
        o.TestbedKind.RAY,
        size=size,
        cpu_slots=cpu_slots,
        ray_address=ray_address,
        emulate_gpu=emulate_gpu,
        task_timeout_s=task_timeout_s,
    ).build()
    assert isinstance(tb, RayTestbed)
    try:
        nodes, warm, results = _measure(tb, wf, m, concurrency, batches, lines, inputs_jsonl, say)
    finally:
        tb.close()
    e2e = [e.e2e_ms for r in results for e in r.executions if e.ok and e.e2e_ms is not None]
    failed = [e for r in (warm, *results) for e in r.executions if not e.ok]
    wall_s = sum(r.wall_s for r in results)
    throughput = len(e2e) / wall_s if wall_s > 0 else 0.0
    _print_batches(say, results, e2e, failed, throughput)
    if json_file is not None or json_out:
        doc = _document(wf, m, concurrency, len(nodes), tb, results, failed, throughput, wall_s)
        if json_file is not None:
            write_json(json_file, doc)
            say.print(f"invocations written to {json_file}", highlight=False, markup=False)
        if json_out:
            print_json(doc)
    if failed:  # the figures are printed; the failures are the exit status
        total = concurrency * (batches + 1)
        err_console.print(
            f"error: {len(failed)} of {total} invocations failed (warm-up batch included)",
            highlight=False,
            markup=False,
        )
        raise SystemExit(1)


def _measure(
    tb: Any, wf: Any, m: dict[str, Any], k: int, batches: int, lines: list[Any], jsonl: Path | None, say: Any
) -> tuple[list[Any], Any, list[Any]]:
    """Say what runs where, then one warm-up batch and ``batches`` measured ones of ``k`` invocations at
    once: (the Ray nodes, the warm-up batch's result, the measured batches' results)."""
    tb.check_mapping(wf, m)  # the mapping that runs: an all-cpu one needs no GPU node
    nodes = tb.nodes()
    say.print(
        f"{wf.name} {format_mapping(wf, m)}: {k} at once x {batches} batches on {len(nodes)} Ray node(s)",
        highlight=False,
        markup=False,
    )
    for n in testbed_notes(tb):
        say.print(f"note: {n}", highlight=False, markup=False)
    if jsonl is not None and len(lines) > batches * k:
        say.print(
            f"note: {len(lines) - batches * k} line(s) of {jsonl} not run (one line per invocation, {batches} x {k})",
            highlight=False,
            markup=False,
        )
    # warm-up: loads and worker processes, not measured (its failures still count)
    warm = tb.run_concurrent(wf, m, k, inputs=_batch(lines, k, 0))
    results = [tb.run_concurrent(wf, m, k, inputs=_batch(lines, k, i)) for i in range(batches)]
    return nodes, warm, results


def _document(
    wf: Any,
    m: dict[str, Any],
    k: int,
    nodes: int,
    tb: Any,
    results: list[Any],
    failed: list[Any],
    throughput: float,
    wall_s: float,
) -> dict[str, Any]:
    """The throughput run's JSON document (--json, --json-out)."""
    return {
        "workflow": wf.name,
        "mapping": {t: v.value for t, v in m.items()},
        "concurrency": k,
        "nodes": nodes,
        "testbed": {"name": tb.name, "notes": testbed_notes(tb)},
        "throughput_per_s": round(throughput, 4),
        "wall_s": round(wall_s, 4),
        "failed": len(failed),
        "batches": [{"wall_s": round(r.wall_s, 4), "executions": [e.to_dict() for e in r.executions]} for r in results],
    }


def _batch(lines: list[dict[str, Any] | None], k: int, i: int) -> list[dict[str, Any] | None]:
    """The inputs of batch ``i``'s ``k`` invocations: invocation j takes line i*k + j (cycling)."""
    return [lines[(i * k + j) % len(lines)] for j in range(k)]


def _print_batches(say: Any, results: list[Any], e2e: list[float], failed: list[Any], throughput: float) -> None:
    for i, r in enumerate(results):
        row = ", ".join("-" if e.e2e_ms is None else f"{e.e2e_ms:,.1f}" for e in r.executions)
        say.print(
            f"batch {i}: E2E ms [{row}]  wall {r.wall_s:.3f} s  {r.throughput_per_s:.2f} inv/s",
            highlight=False,
            markup=False,
        )
    if e2e:
        say.print(
            f"E2E median {statistics.median(e2e):,.1f} ms (min {min(e2e):,.1f}, max {max(e2e):,.1f}); "
            f"throughput {throughput:.2f} invocations/s ({len(e2e)} ok, {len(failed)} failed)",
            highlight=False,
            markup=False,
        )
    for e in failed[:3]:
        say.print(f"failed: {e.status.value}: {e.message}", highlight=False, markup=False)


def _batch_inputs(wf: Any, items: list[str], jsonl: Path | None) -> list[dict[str, Any] | None]:
    """The inputs of each batch, in turn: --input items (every batch), or --inputs-jsonl's lines; [None]
    for a workflow of built-in tools given none. Each is checked against the workflow before Ray starts."""
    from agentsched.cli.invoke_batch import read_inputs_jsonl
    from agentsched.cli.runtime_cmds import parse_inputs
    from agentsched.runtime.inputs import check_input_names, check_inputs_given

    if jsonl is not None and items:
        raise AgentschedError("--inputs-jsonl replaces --input: give one or the other")
    numbered = read_inputs_jsonl(jsonl) if jsonl is not None else [(0, parse_inputs(items, None))]
    for n, inputs in numbered:
        try:
            check_input_names(wf, inputs)
            check_inputs_given(wf, inputs)
        except AgentschedError as e:
            raise AgentschedError(f"--inputs-jsonl {jsonl}: line {n}: {e}" if jsonl is not None else str(e)) from None
    return [inputs or None for _, inputs in numbered]


def register(app: typer.Typer) -> None:
    app.command("throughput")(throughput_cmd)
