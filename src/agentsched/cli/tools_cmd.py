"""Command: ``agentsched tools`` (the 19 tools of the paper's Table 1: family, GPU version, and
whether the ``tools`` extra that runs them is installed). Imports no torch."""

from __future__ import annotations

import importlib.metadata

import typer
from rich.table import Table

from agentsched.cli.common import console, print_json
from agentsched.cli.options import JSON

_EXTRA_PACKAGES = ("torch", "transformers")  # what tools_installed() checks


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _EXTRA_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def tool_rows() -> list[dict[str, object]]:
    """One row per base tool, in Table 1 order: name, family (module), GPU version, workload of the
    a5500 card (the paper's description)."""
    from agentsched.model.cards import load_card_set
    from agentsched.tools import HOST_ONLY, tool_family, tool_names

    cards = load_card_set("a5500")
    rows = []
    for name in tool_names():
        card = cards.cards.get(name)
        rows.append(
            {
                "name": name,
                "family": tool_family(name),
                "gpu": name not in HOST_ONLY,
                "workload": card.workload if card is not None else "",
            }
        )
    return rows


def tools_cmd(json_out: bool = JSON) -> None:
    """List the 19 tools (paper Table 1): family, GPU version, and whether the tools extra is installed."""
    from agentsched.tools import tools_installed

    rows = tool_rows()
    installed = tools_installed()
    versions = _versions()
    if json_out:
        print_json({"tools_extra_installed": installed, "packages": versions, "tools": rows})
        return
    t = Table(title=f"{len(rows)} tools (paper Table 1)")
    for col in ("tool", "family", "GPU version", "workload"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["name"]), str(r["family"]), "yes" if r["gpu"] else "no (host only)", str(r["workload"]))
    console.print(t)
    have = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    if installed:
        console.print(f"tools extra: installed ({have}); `agentsched profile` and --testbed local can run them")
    else:
        console.print(
            "tools extra: not installed (needs torch and transformers); the simulator needs neither. "
            "Install: pip install torch --index-url https://download.pytorch.org/whl/cpu && "
            "pip install 'agentsched[tools]' (docs/tools.md)"
        )


def register(app: typer.Typer) -> None:
    app.command("tools")(tools_cmd)
