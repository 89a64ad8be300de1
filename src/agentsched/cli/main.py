"""The ``agentsched`` command line. Each command group lives in its own module with a
``register(app)`` function; this module wires them and turns every ``AgentschedError`` (and any
unexpected exception) into one line on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import importlib
import os
import sys

import typer

app = typer.Typer(
    name="agentsched",
    help="Place AI workflow tool calls on CPU, GPU now, or the GPU queue.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, registered in this order (a missing optional module is skipped).
_COMMAND_MODULES = (
    "agentsched.cli.core_cmds",  # scenarios, show, simulate, oracle, calibrate
    "agentsched.cli.loop_cmds",  # run, bench
    "agentsched.cli.agent_cmds",  # ablation and agent helpers
    "agentsched.cli.profile_cmd",  # profile (real tools)
)

for _mod in _COMMAND_MODULES:
    try:
        _m = importlib.import_module(_mod)
    except ModuleNotFoundError as _e:
        if _e.name != _mod:  # the module exists but one of its imports is missing: a real bug
            raise
        continue
    _m.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    from agentsched.errors import AgentschedError

    try:
        app(args=argv, prog_name="agentsched", standalone_mode=True)
    except AgentschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - last resort: one line, traceback only on request
        if os.environ.get("AGENTSCHED_DEBUG"):
            raise
        print(f"error: internal error: {type(e).__name__}: {e} (set AGENTSCHED_DEBUG=1 for a traceback)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
