"""Command: generate (random workflows beyond the paper's 13 scenarios, see model/generate.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentsched.cli import options as o
from agentsched.cli.common import console, print_json


def generate_cmd(
    tasks: int = typer.Option(8, "--tasks", help="tasks per workflow"),
    topology: str = typer.Option("layered", "--topology", help="chain, fan-out, layered or random"),
    space: str = typer.Option("binary", "--space", help="decision space: binary or three_way"),
    budget_tightness: float = typer.Option(
        0.0, "--budget-tightness", help="0: no VRAM budget; t in (0, 1): budget (1 - t) x the GPU tasks' VRAM together"
    ),
    # no workflow yet: the card set is where tools are drawn from, and the seed draws the workflows
    cards: str = o.variant(o.CARDS, default="a5500", help="card set the tools are drawn from"),
    seed: int = o.variant(o.SEED, help="seed of the draws (same arguments, same files)"),
    count: int = typer.Option(1, "--count", help="workflows to write"),
    out: Path = o.variant(o.OUT, default=Path("generated")),  # generate's own folder
    json_out: bool = o.JSON,
) -> None:
    """Write random workflows (YAML) for `agentsched bench --scenarios DIR`."""
    from agentsched.model.generate import generate_suite

    paths = generate_suite(
        out,
        count=count,
        seed=seed,
        tasks=tasks,
        topology=topology,
        space=space,
        budget_tightness=budget_tightness,
        cards=cards,
    )
    if json_out:
        print_json({"out": str(out), "seed": seed, "files": [str(p) for p in paths]})
        return
    for p in paths:
        console.print(str(p), highlight=False)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_cmd)
