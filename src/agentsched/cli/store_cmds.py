"""Commands: store list|forget|export|vacuum (look after the runtime's SQLite store)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from agentsched.cli.common import console
from agentsched.cli.options import JSON, OUT, STORE, variant
from agentsched.errors import AgentschedError

store_app = typer.Typer(
    name="store", help="List, forget, export or compact what a store has learned.", no_args_is_help=True
)

WAIT = typer.Option(30.0, "--wait-s", help="how long to wait for a store another process is writing")
NAME_HELP = "the learner: its workflow's name, its key (or a unique prefix of 4+) or #ID, as `store list` shows"


def _open(store: Path, wait_s: float, *, read_only: bool) -> Any:
    from agentsched.cli.common import existing_store
    from agentsched.store import Store

    if not (wait_s >= 0 and wait_s < 1e6):
        raise AgentschedError(f"--wait-s must be a number in [0, 1e6), got {wait_s}")
    existing_store(store)  # never create an empty store by looking after it
    return Store(store, read_only=read_only, busy_timeout_s=wait_s, on_wait=lambda m: typer.echo(m, err=True))


def _when(epoch_s: float | None) -> str:
    return "-" if epoch_s is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def list_cmd(store: Path = STORE, json_out: bool = JSON, wait_s: float = WAIT) -> None:
    """Every learner in the store: workflow, key, policy, invocations, last invocation, best mapping."""
    from agentsched.store.admin import file_bytes, summaries
    from agentsched.store.unwritten import waiting

    st = _open(store, wait_s, read_only=True)
    try:
        rows = summaries(st)
    finally:
        st.close()
    kept = waiting(store)  # records a runtime kept on disk while the store refused them
    if json_out:
        typer.echo(
            json.dumps({"store": str(store), "bytes": file_bytes(store), "learners": rows, "unwritten": kept}, indent=2)
        )
        return
    for path, n in kept.items():
        console.print(
            f"{n} record(s) kept in {path} while the store refused them: the next runtime (or `store "
            "vacuum`) that opens it for writing writes them",
            highlight=False,
        )
    if not rows:
        console.print(f"store {store} holds no learner yet", highlight=False)
        return
    t = Table(title=f"learners in {store}")
    for col in ("id", "workflow", "key", "policy", "invocations", "last", "best mapping", "best E2E ms"):
        t.add_column(col, justify="right" if col in ("id", "invocations", "best E2E ms") else "left")
    for r in rows:
        # modes as stored, as the service's API and history write them (gpu_now in a binary space too)
        best = ",".join(f"{k}={v}" for k, v in (r["best_mapping"] or {}).items()) or "-"
        e2e = "-" if r["best_e2e_ms"] is None else f"{r['best_e2e_ms']:,.1f}"
        t.add_row(
            str(r["learner"]),
            r["workflow"],
            r["key"],
            r["policy"],
            str(r["invocations"]),
            _when(r["last_s"]),
            best,
            e2e,
        )
    console.print(t)


def forget_cmd(
    name: str = typer.Argument(..., help=NAME_HELP), store: Path = STORE, json_out: bool = JSON, wait_s: float = WAIT
) -> None:
    """Delete one learner's history, asking nothing; says what it removed.

    Its executions and rounds go in one transaction; the next runtime with its settings starts afresh."""
    from agentsched.store.admin import find_one

    st = _open(store, wait_s, read_only=False)
    try:
        ln = find_one(st, name)
        gone = st.forget(ln.id)
    finally:
        st.close()
    if json_out:
        typer.echo(json.dumps({"store": str(store), "forgot": _named(ln), "invocations_removed": gone}))
        return
    console.print(
        f"forgot learner #{ln.id} {ln.key} of {ln.workflow_name} ({ln.policy}): {gone} invocation(s) "
        f"and its rounds removed from {store}",
        highlight=False,
        soft_wrap=True,
    )


def export_cmd(
    name: str = typer.Argument(..., help=NAME_HELP),
    # a file, not a folder
    out: Path = variant(OUT, help="the JSON file to write (format: docs/runtime.md)"),
    store: Path = STORE,
    json_out: bool = JSON,
    wait_s: float = WAIT,
) -> None:
    """Write one learner (settings, workflow, cards, rounds, every execution's record) as JSON."""
    from agentsched.cli.output import check_output_file
    from agentsched.store.admin import find_one
    from agentsched.store.export import looks_like_export, write_export

    check_output_file(out, "--out")
    # an earlier export (of any version) is replaced; any other file (a workflow file) is not
    if out.is_file() and not looks_like_export(out):
        raise AgentschedError(
            f"--out: {out} exists and is not an agentsched export: not overwritten (remove it or choose another file)"
        )
    st = _open(store, wait_s, read_only=True)
    try:
        ln = find_one(st, name)
        invocations, rounds = write_export(st, ln, out)
    finally:
        st.close()
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "store": str(store),
                    "exported": _named(ln),
                    "out": str(out),
                    "invocations": invocations,
                    "rounds": rounds,
                }
            )
        )
        return
    console.print(
        f"exported learner #{ln.id} {ln.key} of {ln.workflow_name} ({invocations} "
        f"invocation(s), {rounds} round(s)) to {out}",
        highlight=False,
        soft_wrap=True,
    )


def vacuum_cmd(store: Path = STORE, json_out: bool = JSON, wait_s: float = WAIT) -> None:
    """Compact the store file (SQLite VACUUM); prints its size before and after."""
    from agentsched.store.admin import file_bytes

    st = _open(store, wait_s, read_only=False)
    try:
        before = file_bytes(store)
        st.vacuum()
        after = file_bytes(store)
    finally:
        st.close()
    if json_out:
        typer.echo(json.dumps({"store": str(store), "bytes_before": before, "bytes_after": after}))
        return
    console.print(f"vacuumed {store}: {before:,} bytes before, {after:,} bytes after", highlight=False)


def _named(ln: Any) -> dict[str, Any]:
    return {"learner": ln.id, "key": ln.key, "workflow": ln.workflow_name, "policy": ln.policy}


def register(app: typer.Typer) -> None:
    store_app.command("list")(list_cmd)
    store_app.command("forget")(forget_cmd)
    store_app.command("export")(export_cmd)
    store_app.command("vacuum")(vacuum_cmd)
    app.add_typer(store_app, name="store")
