"""Command: ``agentsched profile`` (measure the real tools, write a card set)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from agentsched.cli import options as o


def profile_cmd(
    out: Path = o.variant(o.OUT, short="-o", help="card-set JSON file to write"),  # a file, not a folder
    tools: str = typer.Option(
        "all",
        help="'all' or a comma list of built-in tools and your own tools as "
        "package.module:Class, e.g. clip,groupby,mytools:Embed",
    ),
    device: str = typer.Option("cpu", help="cpu, gpu, or all"),
    # not a testbed's size: profile takes the name as text and checks it itself (plan_profile)
    size: str = o.variant(o.SIZE, default="small", help="paper (the paper's architectures) or small (tiny configs)"),
    runs: int = typer.Option(30, help="timed calls per tool and device (median); the paper uses 30"),
    warmup: int = typer.Option(2, help="untimed calls before the timed ones"),
    seed: int = o.variant(o.SEED, help="seed of weights and inputs"),  # no noise or policy: the tools' own seed
    name: str | None = typer.Option(None, help="card set name (default: the file's stem)"),
    busy: str = typer.Option("warn", help="when other processes load the CPU: warn, wait, or ignore"),
    max_busy_pct: float = typer.Option(30.0, help="CPU use by others (percent) counted as busy"),
    max_wait_s: float = typer.Option(120.0, help="with --busy wait: longest wait per tool"),
    merge: bool = typer.Option(True, help="keep cards (and cpu_ms) of an existing --out file"),
    curves: bool = typer.Option(
        False,
        "--curves",
        help="also time each tool at 6 input sizes spanning 32x and "
        "write its cost curves (time, VRAM as functions of the input size) into its card",
    ),
    json_out: bool = o.JSON,
) -> None:
    """Measure each tool's latency, load time and VRAM on this machine; write a card set."""
    from agentsched.cli.output import check_output_file
    from agentsched.model.cards import load_card_set
    from agentsched.profiler.profiler import ProfileError, build_card_set, plan_profile

    # every check before the progress bar and the measurements: an error is the only stderr line
    plan = plan_profile(
        tools,
        device,
        size=size,
        runs=runs,
        warmup=warmup,
        seed=seed,
        busy=busy,
        max_busy_pct=max_busy_pct,
        max_wait_s=max_wait_s,
    )
    if out.exists() and not out.is_file() and not out.is_dir():  # e.g. /dev/full: merging would read it without end
        raise ProfileError(f"--out: {out} is not a regular file")
    check_output_file(out, "--out", create_parent=True)
    base = load_card_set(out) if merge and out.is_file() else None
    run, sweeps = _measure(plan, curves)
    cards = build_card_set(run, name or out.stem, base=base)
    if sweeps:
        from agentsched.profiler.sizes import with_curves

        cards = with_curves(cards, sweeps)
    try:
        cards.save(out)
    except OSError as e:
        raise ProfileError(f"cannot write {out}: {e.strerror}") from None
    if json_out:  # the measurements and the card set written; the progress went to stderr
        _print_json(out, plan, run, cards, sweeps if curves else None)
    else:
        _print_table(plan, run, cards, sweeps, out)


def _measure(plan, curves: bool) -> tuple:
    """The plan measured (and, with ``curves``, swept over sizes) under a progress bar on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from agentsched.profiler.profiler import run_plan

    with Progress(
        TextColumn("[bold]profile[/bold] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task("starting", total=None)

        def on_step(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total)

        run = run_plan(plan, on_step=on_step, say=lambda msg: bar.console.print(msg))
        return run, (_sweep(plan, on_step) if curves else [])


def _print_json(out: Path, plan, run, cards, sweeps: list | None) -> None:
    from agentsched.cli.common import print_json

    doc = {
        "out": str(out),
        "size": plan.size,
        "runs": plan.runs,
        "machine": run.machine,
        "measurements": [
            {
                "tool": m.tool,
                "device": m.device,
                "load_ms": m.load_ms,
                "call_ms": m.call_ms,
                "vram_mb": m.vram_mb,
                "spread": m.spread,
                "busy_pct": m.busy_pct,
            }
            for m in run.measurements
        ],
        "card_set": json.loads(cards.to_json()),
    }
    print_json(doc | ({"curves": [s.to_dict() for s in sweeps]} if sweeps is not None else {}))


def _print_table(plan, run, cards, sweeps: list, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from agentsched.model.tool import is_tool_path

    builtin = any(not is_tool_path(m.tool) for m in run.measurements)  # --size is the built-in tools' only
    t = Table(
        title=f"{cards.name}: {run.machine.get('cpu')}"
        + (f" + {run.machine['gpu']}" if run.machine.get("gpu") else "")
        + (f", size {plan.size}" if builtin else "")
        + f", {plan.runs} runs"
    )
    for col in ("tool", "device", "load ms", "median ms", "VRAM MB", "spread", "busy %"):
        t.add_column(col, justify="left" if col in ("tool", "device") else "right")
    for m in run.measurements:
        t.add_row(
            m.tool,
            m.device,
            f"{m.load_ms:,.1f}",
            f"{m.call_ms:,.2f}",
            "-" if m.vram_mb is None else f"{m.vram_mb:,.1f}",
            f"{m.spread:.2f}x",
            f"{m.busy_pct:.0f}",
        )
    Console().print(t)
    for s in sweeps:
        f = s.fit
        Console().print(
            f"{s.tool} on {s.device}: {len(s.sizes)} sizes, {s.span:.0f}x span in {s.unit}; fit error "
            f"{100 * f.median_error:.1f}% median, {100 * f.max_error:.1f}% worst"
            + (f", {100 * f.loo_median_error:.1f}% leave-one-out" if f.loo_median_error is not None else "")
        )
    Console().print(f"wrote {len(cards.cards)} cards to {out}")


def _sweep(plan, on_step) -> list:
    """Each (tool, device) of the plan timed at several input sizes (``profiler.sizes.sweep_sizes``)."""
    from agentsched.profiler.sizes import sweep_sizes

    out = []
    for i, (n, d) in enumerate(plan.jobs):
        on_step(f"{n} on {d}: sizes", i, len(plan.jobs))
        out.append(
            sweep_sizes(
                n, d, scale=plan.size, runs=max(1, min(plan.runs, 5)), warmup=min(plan.warmup, 1), seed=plan.seed
            )
        )
    on_step("done", len(plan.jobs), len(plan.jobs))
    return out


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_cmd)
