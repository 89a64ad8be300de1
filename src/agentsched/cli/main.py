"""The ``agentsched`` command line. Each command family lives in its own module: module-level
command functions and a ``register(app)`` that adds them (options several commands share are
declared once, in ``options.py``); this module wires them and turns every ``AgentschedError`` (and any
unexpected exception) into one line on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
import threading

import typer

from agentsched.cli.options import LLM_FLAGS
from agentsched.errors import Terminated


def _hide_flag_types() -> None:
    """Help without a value type after a flag: typer's rich help prints ``<bool>`` after every flag
    (``--json <bool>``, ``--help <bool>``) though a flag takes no value (``--json true`` is refused);
    its plain help already leaves it out. One override of the rich column, for every command."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_flags_hidden", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag and not self.count else shown(self, ctx)

    display_type_rich._flags_hidden = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_hide_flag_types()

app = typer.Typer(
    name="agentsched",
    help="Place AI workflow tool calls on CPU, GPU now, or the GPU queue.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from agentsched import __version__

        typer.echo(f"agentsched {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Place AI workflow tool calls on CPU, GPU now, or the GPU queue."""


# Command modules, registered in this order (a missing optional module is skipped).
_COMMAND_MODULES = (
    "agentsched.cli.core_cmds",  # scenarios, show, simulate, oracle, calibrate
    "agentsched.cli.run_cmd",  # run, policies
    "agentsched.cli.bench_cmd",  # bench
    "agentsched.cli.agent_cmds",  # ablation and agent helpers
    "agentsched.cli.profile_cmd",  # profile (real tools)
    "agentsched.cli.generate_cmd",  # generate (random workflows)
    "agentsched.cli.runtime_cmds",  # invoke, history (the learning runtime and its store)
    "agentsched.cli.ray_cmds",  # throughput (K invocations at once on a Ray cluster)
    "agentsched.cli.tools_cmd",  # tools (the 19-tool library)
    "agentsched.cli.load_cmd",  # load (a stream of invocations sharing one machine)
    "agentsched.cli.loadgen_cmd",  # loadgen (that stream fired open-loop at a running service)
    "agentsched.cli.serve_cmd",  # serve (the placement service over HTTP)
    "agentsched.cli.store_cmds",  # store list|forget|export|vacuum (look after a store)
)

for _mod in _COMMAND_MODULES:
    try:
        _m = importlib.import_module(_mod)
    except ModuleNotFoundError as _e:
        if _e.name != _mod:  # the module exists but one of its imports is missing: a real bug
            raise
        continue
    _m.register(app)


# commands whose --json took a FILE before the one convention (docs/json.md): a file name after
# --json there is the old form and gets a one-line pointer to --json-out
_JSON_FILE_BEFORE = ("run", "ablation", "agent-check", "throughput")


def old_json_form(argv: list[str]) -> str | None:
    """The one-line error for ``--json FILE`` / ``--json=FILE`` on a command that now takes --json-out."""
    if not argv or argv[0] not in _JSON_FILE_BEFORE:
        return None
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--json=") else None
        if arg == "--json" and i + 1 < len(argv) and argv[i + 1].lower().endswith(".json"):
            value = argv[i + 1]
        if value is not None:
            return (
                f"--json is a flag now (JSON on stdout); to write a file use --json-out {value} "
                f"(a workflow file goes before --json)"
            )
    return None


def _secrets(argv: list[str]) -> list[str]:
    """The secrets this invocation was given (an API key, URL credentials), to mask in error lines."""
    from agentsched.agent.llm.config import ENV_API_KEY, ENV_BASE_URL
    from agentsched.agent.secrets import url_secrets
    from agentsched.errors import address_secrets

    # (option, environment variable) whose value is a secret, and whose value is a URL that may carry credentials
    key = (LLM_FLAGS["api_key"], ENV_API_KEY)
    url_given = (LLM_FLAGS["base_url"], ENV_BASE_URL)

    def given(flag: str, var: str) -> list[str]:
        values = [os.environ.get(var, "")]
        for i, a in enumerate(argv):
            if a == flag and i + 1 < len(argv):
                values.append(argv[i + 1])
            elif a.startswith(flag + "="):
                values.append(a[len(flag) + 1 :])
        return values

    ray = [s for a in given("--ray-address", "RAY_ADDRESS") for s in address_secrets(a)]  # user:pw@host, no scheme
    return [*given(*key), *(s for url in given(*url_given) for s in url_secrets(url)), *ray]


def _error(text: str, argv: list[str]) -> None:
    """One ``error: ...`` line on stderr, with URL credentials and every given secret masked."""
    from agentsched.agent.secrets import redact

    if text in ("interrupted", "terminated"):
        _ctrl_c["said"] = True
    print(redact(f"error: {text}", _secrets(argv)), file=sys.stderr, flush=True)


# Ctrl-C: the first raises KeyboardInterrupt (the command stops its runs and closes its store); a
# second exits at once, whatever is still waiting (a tool that never returns), with one line.
# SIGTERM (a supervisor, `timeout`) the same, as Terminated, with its own line and status 143, so that
# the invocation running is recorded rather than lost with the process.
_ctrl_c: dict[str, object] = {"count": 0, "said": False, "at_exit": False, "term": False}
_STOPPED = {False: ("interrupted", 130), True: ("terminated", 143)}  # (the error line, the status)


def _on_sigint(signum: int, frame: object) -> None:
    term = signum == getattr(signal, "SIGTERM", None)
    if _ctrl_c["count"]:
        line, status = _STOPPED[bool(_ctrl_c["term"])]
        if not _ctrl_c["said"]:
            os.write(2, f"error: {line}\n".encode())
        os._exit(status)
    _ctrl_c["count"] += 1
    _ctrl_c["term"] = term
    raise Terminated if term else KeyboardInterrupt


def _second_ctrl_c_exits(console: bool) -> object:
    """Install ``_on_sigint`` (the main thread only); the handler it replaces, to restore (None: none).

    ``console``: the process ends with this command, so a Ctrl-C after its last exit step is ignored."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _ctrl_c.update(count=0, said=False, term=False)
    if console and not _ctrl_c.get("at_exit"):
        atexit.register(_late_ctrl_c_ignored)  # registered first, so it runs last
        _ctrl_c["at_exit"] = True
    if console and hasattr(signal, "SIGTERM"):  # (in-process calls leave the caller's SIGTERM alone)
        signal.signal(signal.SIGTERM, _on_sigint)
    return signal.signal(signal.SIGINT, _on_sigint)


def _late_ctrl_c_ignored() -> None:
    """The last exit step: ignore Ctrl-C from here on.

    Why: the exit code is decided and the threads and other exit steps are done; just after this,
    Python resets SIGINT to its default, and a Ctrl-C then would kill the process by signal (status
    -2, no ``error:`` line) instead of letting it end with its code."""
    for sig in (signal.SIGINT, getattr(signal, "SIGTERM", None)):
        if sig is not None and signal.getsignal(sig) is _on_sigint:
            signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``argv``: called in-process, e.g. by tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    old = old_json_form(args)
    if old is not None:
        _error(old, args)
        sys.exit(2)
    previous = _second_ctrl_c_exits(console=argv is None)
    try:
        _main(args, argv)
    finally:
        # in-process calls get their handler back; the console command keeps it until the process
        # is gone (a second Ctrl-C while exiting still exits at once)
        if previous is not None and argv is not None:
            signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]


def _main(args: list[str], argv: list[str] | None) -> None:
    """Run the command; every error becomes one line and an exit code."""
    from agentsched.errors import AgentschedError

    try:
        code = app(args=argv, prog_name="agentsched", standalone_mode=False)
        # typer turns Ctrl-C into Exit(130), which non-standalone click *returns*: exit with it
        if isinstance(code, int) and not isinstance(code, bool) and code:
            if code == 130:
                line, code = _STOPPED[bool(_ctrl_c["term"])]
                _error(line, args)
            sys.exit(code)
    except typer.Exit as e:  # --help and friends
        sys.exit(e.exit_code)
    except typer.Abort:
        _error("aborted", args)
        sys.exit(130)
    except typer.TyperException as e:  # usage errors (typer's click): one line like every other error
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `agentsched`: help was printed
            sys.exit(0)
        ctx = getattr(e, "ctx", None)
        # the whole path: a subcommand's (`store export`) help is not its own name's
        cmd = ctx.command_path.partition(" ")[2] if ctx is not None and ctx.parent is not None else ""
        cmd = f" {cmd}" if cmd else ""
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        message = message.replace("Value error, ", "")  # typer's prefix on an enum choice it rejects
        _error(f"{message} (see 'agentsched{cmd} --help')", args)
        sys.exit(getattr(e, "exit_code", 2))
    except AgentschedError as e:
        _error(str(e), args)
        sys.exit(2)
    except OSError as e:  # e.g. stdout on a full disk, an unwritable output file
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        _error(f"cannot write{where}: {e.strerror or e}", args)
        sys.exit(1)
    except KeyboardInterrupt as e:
        line, status = _STOPPED[isinstance(e, Terminated) or bool(_ctrl_c["term"])]
        _error(line, args)
        sys.exit(status)
    except Exception as e:  # noqa: BLE001 - last resort: one line, traceback only on request
        if os.environ.get("AGENTSCHED_DEBUG"):
            raise
        _error(f"internal error: {type(e).__name__}: {e} (set AGENTSCHED_DEBUG=1 for a traceback)", args)
        sys.exit(1)


if __name__ == "__main__":
    main()
