"""Commands: scenarios, show, simulate, oracle, calibrate."""

from __future__ import annotations

import sys

import typer
from rich.table import Table
from rich.text import Text

from agentsched.cli import options as o
from agentsched.cli.common import console, load_workflow, load_workflow_and_world, positive, print_json, testbed_spec
from agentsched.loop.runner import noise_stream
from agentsched.model.execution import Execution
from agentsched.model.mapping import format_mapping, parse_mapping
from agentsched.model.text import plural
from agentsched.model.workflow import Workflow
from agentsched.scenarios import list_scenarios, load_scenario


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


RICH_TABLE_MAX_ROWS = 200  # beyond this, plain aligned text: rich renders ~1 ms per row


def print_rows(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A table: rich for a screenful, plain aligned columns written at once for thousands of rows."""
    if len(rows) <= RICH_TABLE_MAX_ROWS:
        t = Table(title=title or None)
        for col in header:
            t.add_column(col)
        for r in rows:
            t.add_row(*r)
        console.print(t)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [title] if title else []
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    sys.stdout.write("\n".join(lines) + "\n")


def timeline_table(wf: Workflow, ex: Execution) -> Table:
    t = Table(
        title=f"{wf.name}: {ex.status.value}, E2E {_fmt_ms(ex.e2e_ms)} ms, "
        f"peak VRAM {ex.peak_vram_mb:g} MB" + (f" ({ex.message})" if ex.message else "")
    )
    for col in ("task", "tool", "mode", "ready ms", "start ms", "load ms", "end ms", "VRAM MB"):
        t.add_column(col, justify="right" if "ms" in col or "MB" in col else "left")
    for s in ex.spans:
        t.add_row(
            s.task,
            s.tool,
            wf.decision_space.label(s.mode),
            _fmt_ms(s.ready_ms),
            _fmt_ms(s.start_ms),
            _fmt_ms(s.load_ms) if s.load_ms else "",
            _fmt_ms(s.end_ms),
            f"{s.vram_mb:g}" if s.vram_mb else "",
        )
    return t


def scenarios_cmd(json_out: bool = o.JSON) -> None:
    """List the built-in scenarios (the paper's Table 3)."""
    rows = []
    for name in list_scenarios():
        wf = load_scenario(name)
        topo = "diamond" if wf.edges else "fan-out"
        rows.append(
            {
                "name": name,
                "topology": topo,
                "decision_space": wf.decision_space.value,
                "vram_budget_mb": wf.vram_budget_mb,
                "total_vram_mb": wf.total_vram_mb,
                "tools": [wf.task_cards[t].name for t in wf.task_ids],
            }
        )
    if json_out:
        print_json(rows)
        return
    t = Table(title="Built-in scenarios (paper Table 3, cards a5500)")
    for col in ("name", "topology", "space", "budget MB", "total VRAM MB", "tools (A, B, C, D)"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            r["topology"],
            r["decision_space"],
            "-" if r["vram_budget_mb"] is None else f"{r['vram_budget_mb']:g}",
            f"{r['total_vram_mb']:g}",
            ", ".join(r["tools"]),
        )
    console.print(t)


def show_cmd(
    workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
    cards: str | None = o.CARDS,
    json_out: bool = o.JSON,
) -> None:
    """Show a workflow: its DAG, tool cards, budget and total VRAM."""
    from agentsched.model.tool import without_tool_imports

    with without_tool_imports():  # describing a workflow never runs a user module's code
        wf = load_workflow(workflow, cards)
        tc = wf.task_cards
    # a user tool without a card: its VRAM is unknown (its cold card's figures are placeholders)
    unprofiled = [t for t in wf.task_ids if t in wf.unprofiled]
    total_mb = None if unprofiled else wf.total_vram_mb
    if json_out:
        print_json(
            {
                "name": wf.name,
                "decision_space": wf.decision_space.value,
                "vram_budget_mb": wf.vram_budget_mb,
                "total_vram_mb": total_mb,
                "card_set": wf.card_set.name,
                "unprofiled": unprofiled,
                "edges": [list(e) for e in wf.edges],
                "tasks": {t: tc[t].model_dump(mode="json") for t in wf.task_ids},
            }
        )
        return
    console.print(Text.assemble((wf.name, "bold"), f" {wf.description}"))
    total = f"{total_mb:g} MB" if total_mb is not None else f"unknown ({plural(len(unprofiled), 'task')} not profiled)"
    cards = wf.card_set.name + (
        f" (no card for {len(unprofiled)} of {plural(len(wf.task_ids), 'task')}: agentsched profile writes them)"
        if unprofiled
        else ""
    )
    console.print(
        f"decision space: {wf.decision_space.value}; VRAM budget: "
        f"{'none' if wf.vram_budget_mb is None else f'{wf.vram_budget_mb:g} MB'}; "
        f"total VRAM if all on GPU: {total}; cards: {cards}",
        highlight=False,
    )
    edges = ", ".join(f"{a}->{b}" for a, b in wf.edges) or "none (all tasks ready at t=0)"
    if len(wf.edges) > RICH_TABLE_MAX_ROWS:
        sys.stdout.write(f"edges ({len(wf.edges):,}): {edges}\n")
    else:
        console.print(f"edges: {edges}")
    rows = []
    for tid in wf.task_ids:
        c = tc[tid]
        cpu = "?" if tid in wf.unprofiled else f"{c.cpu_ms:g}"  # (a placeholder of the cold start, not a time)
        rows.append(
            [
                tid,
                c.name,
                c.workload,
                cpu,
                "-" if c.gpu_ms is None else f"{c.gpu_ms:g}",
                "-" if c.speedup is None else f"{c.speedup:.1f}x",
                # (without a GPU implementation a card's load and VRAM are never used: shown as none)
                "-" if c.load_ms is None or not c.has_gpu else f"{c.load_ms:g}",
                "-" if c.vram_mb is None or not c.has_gpu else f"{c.vram_mb:g}",
                ", ".join(c.tags),
            ]
        )
    print_rows("", ["task", "tool", "workload", "cpu ms", "gpu ms", "speedup", "load ms", "VRAM MB", "tags"], rows)


def simulate_cmd(
    workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
    # simulate executes the one mapping it is given: required
    mapping: str = o.variant(o.MAPPING_M, default=..., help="e.g. A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu"),
    seed: int = o.SEED,
    noise: float | None = o.NOISE,
    cards: str | None = o.CARDS,
    testbed: o.TestbedKind = o.TESTBED,
    size: o.Size = o.SIZE,
    cpu_slots: int | None = o.CPU_SLOTS,
    world: str | None = o.WORLD,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    json_out: bool = o.JSON,
    gantt: str | None = typer.Option(None, "--gantt", help="draw the timeline to this PNG"),
) -> None:
    """Execute one mapping once and print its timeline."""
    from agentsched.report.gantt import check_gantt_path, save_gantt

    gantt_path = check_gantt_path(gantt) if gantt else None  # fail before any work
    wf, wf_world = load_workflow_and_world(workflow, cards)
    m = parse_mapping(wf, mapping)
    spec = testbed_spec(
        testbed,
        seed=seed,
        noise=noise,
        size=size,
        cpu_slots=cpu_slots,
        world=world,
        from_workflows=[wf_world],
        task_timeout_s=task_timeout_s,
    )
    from agentsched.runtime.setup import check_sim_cards

    check_sim_cards(spec, wf)  # user tools without cards: placeholder times, not an E2E
    tb = spec.build()
    try:
        ex = tb.run(wf, m, rng=noise_stream(seed))
    finally:
        tb.close()
    if gantt_path is not None:
        gantt_path = save_gantt(wf, [(format_mapping(wf, m), ex)], gantt_path)
    if json_out:
        print_json(ex.to_dict())
        return
    console.print(timeline_table(wf, ex))
    if gantt_path is not None:
        console.print(f"Gantt chart written to {gantt_path}")


def oracle_cmd(
    workflow: str = typer.Argument(..., help="scenario name (S1..S13) or workflow file"),
    top: int = typer.Option(5, help="how many mappings to show"),
    cards: str | None = o.CARDS,
    testbed: o.TestbedKind = o.TESTBED,
    size: o.Size = o.SIZE,
    repeats: int = o.variant(o.REPEATS, help="runs per mapping on a noisy testbed (median)"),  # no rounds in oracle
    # no policy here, and the sim oracle runs noise-free: the seed only reaches a real testbed
    seed: int = o.variant(
        o.SEED, help="seed of the testbed (local/ray: the tools' weights and inputs; the sim oracle is noise-free)"
    ),
    cpu_slots: int | None = o.CPU_SLOTS,
    world: str | None = o.WORLD,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    json_out: bool = o.JSON,
) -> None:
    """Brute-force every mapping and rank the feasible ones by E2E."""
    from agentsched.oracle import brute_force

    positive("--top", top)
    positive("--repeats", repeats)
    wf, wf_world = load_workflow_and_world(workflow, cards)
    spec = testbed_spec(
        testbed,
        seed=seed,
        noise=0.0 if testbed is o.TestbedKind.SIM else None,
        size=size,
        cpu_slots=cpu_slots,
        world=world,
        from_workflows=[wf_world],
        task_timeout_s=task_timeout_s,
    )
    from agentsched.runtime.setup import check_sim_cards

    check_sim_cards(spec, wf)  # user tools without cards: it would rank placeholder times
    tb = spec.build()
    try:
        tb.preflight(wf)  # the local testbed: no CUDA -> one line, before any run
        res = brute_force(wf, tb, repeats=repeats)
    finally:
        tb.close()
    feas = res.feasible
    if json_out:
        print_json(
            {
                "workflow": wf.name,
                "decision_space": wf.decision_space.value,
                "vram_budget_mb": wf.vram_budget_mb,
                "mappings_total": len(res.ranked),
                "feasible": len(feas),
                "executions": res.executions,
                "top": [e.to_dict() for e in res.ranked[:top]],
            }
        )
        return
    t = Table(
        title=f"Oracle for {wf.name}: {len(feas)} of {len(res.ranked)} mappings feasible ({res.executions} executions)"
    )
    for col in ("rank", "mapping", "E2E ms", "x best", "peak VRAM MB"):
        t.add_column(col)
    best = feas[0].e2e_ms if feas else None
    for i, e in enumerate(res.ranked[:top], 1):
        t.add_row(
            str(i),
            format_mapping(wf, e.mapping),
            _fmt_ms(e.e2e_ms),
            "-" if e.e2e_ms is None or not best else f"{e.e2e_ms / best:.3f}",
            f"{e.peak_vram_mb:g}",
        )
    console.print(t)


def calibrate_cmd(world: str | None = o.WORLD, json_out: bool = o.JSON) -> None:
    """Compare the simulator (a5500 cards, a5500 world unless --world) with the paper: Table 3 oracles and
    Table 2 latencies."""
    from agentsched.experiments.calibration import calibrate, render_calibration

    rep = calibrate(world=testbed_spec(o.TestbedKind.SIM, world=world).world)
    if json_out:
        print_json(rep.to_dict())
        return
    render_calibration(rep, console)


def register(app: typer.Typer) -> None:
    app.command("scenarios")(scenarios_cmd)
    app.command("show")(show_cmd)
    app.command("simulate")(simulate_cmd)
    app.command("oracle")(oracle_cmd)
    app.command("calibrate")(calibrate_cmd)
