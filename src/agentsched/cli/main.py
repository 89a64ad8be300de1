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
    "agentsched.cli.generate_cmd",  # generate (random workflows)
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
        app(args=argv, prog_name="agentsched", standalone_mode=False)
    except typer.Exit as e:  # --help and friends
        sys.exit(e.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as e:  # usage errors (typer's click): one line like every other error
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `agentsched`: help was printed
            sys.exit(0)
        ctx = getattr(e, "ctx", None)
        cmd = f" {ctx.info_name}" if ctx is not None and ctx.parent is not None else ""
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        print(f"error: {message} (see 'agentsched{cmd} --help')", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except AgentschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # e.g. stdout on a full disk, an unwritable output file
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"error: cannot write{where}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
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
