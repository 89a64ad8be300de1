"""Command: serve (the placement service over HTTP; docs/serve.md). Needs the ``serve`` extra."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from agentsched.cli import options as o
from agentsched.cli.common import by_flag, testbed_spec
from agentsched.errors import AgentschedError, FieldError


class LogLevel(str, Enum):
    """uvicorn's log levels (a bad one was an internal error at start: uvicorn's KeyError)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"
    TRACE = "trace"


# options of serve alone (the shared ones are options.py's)
WORKFLOWS = typer.Argument(..., help="workflow files, folders of them, or scenario names")
# a service names its one store, for every workflow's learner: required
STORE = o.variant(o.STORE, default=..., help="SQLite store of every workflow's learner (created when missing)")
HOST = typer.Option("127.0.0.1", "--host", help="address to bind (loopback by default)")
PORT = typer.Option(8000, "--port", help="TCP port (0: any free one, printed at start)")
# a service runs the real tools by default: sim needs profiled cards
TESTBED = o.variant(
    o.TESTBED, default=o.TestbedKind.LOCAL, help="local (real tools, default), ray or sim (sim needs profiled cards)"
)
REALTIME = typer.Option(
    False,
    "--realtime",
    help="sim: tools sleep their simulated durations (load tests without a GPU) on one shared simulated machine",
)
# --realtime only, and a service fits the smallest budget its workflows name (load: the largest)
VRAM_BUDGET = o.variant(
    o.VRAM_BUDGET_MB,
    help="--realtime: the shared GPU's VRAM budget (default: the smallest the workflows name; none if none)",
)
PLACEMENT = typer.Option(
    "policy",
    "--placement",
    help="policy: each workflow's policy picks a mapping per "
    "invocation; live (local, or sim --realtime): each task placed when ready by the load-aware "
    "decider over the machine's live state (every invocation in flight, the VRAM budget, the "
    "CPU slots)",
)
INSECURE = typer.Option(False, "--insecure", help="allow a non-loopback --host without --token-file")
MAX_CONCURRENCY = typer.Option(64, "--max-concurrency", help="invocations accepted at once (more: 503)")
DRAIN_S = typer.Option(30.0, "--drain-s", help="SIGTERM: seconds in-flight invocations may take")
# an online policy, one learner per served workflow
POLICY = o.variant(o.POLICY, help=f"online policy of every workflow ({o.POLICY_DEFAULT_HELP})")
LOG_LEVEL = typer.Option(
    LogLevel.WARNING,
    "--log-level",
    case_sensitive=False,
    help="uvicorn's log level (the "
    "service's own lines, an access line per request among them, are said unless error or "
    "critical)",
)
ACCESS_LOG = typer.Option(True, "--access-log/--no-access-log", help="one line per request on stderr")
MAX_BODY_MB = typer.Option(4.0, "--max-body-mb", help="a request body's cap (MiB; more: 413, unread)")
MAX_OUTPUT_MB = typer.Option(
    8.0, "--max-output-mb", help="an invocation answer's outputs' cap (MiB; beyond it values are cut, marked)"
)
MAX_MESSAGE_CHARS = typer.Option(
    4096, "--max-message-chars", help="an error text's cap in an answer or a history (cut, marked)"
)
MAX_CONNECTIONS = typer.Option(1000, "--max-connections", help="open connections at once (more: closed with a 503)")
HEADER_TIMEOUT_S = typer.Option(
    10.0,
    "--header-timeout-s",
    help="seconds a request's head (request line and headers) may take to arrive; slower: the connection is closed",
)
KEEP_ALIVE_S = typer.Option(5.0, "--keep-alive-s", help="seconds an idle kept-alive connection stays open")

# the command's parameters that are ServiceConfig fields of the same name (its flag: --the-name)
CONFIG_PARAMS = (
    "realtime",
    "time_scale",
    "vram_budget_mb",
    "policy",
    "placement",
    "round_size",
    "seed",
    "cards",
    "max_concurrency",
    "drain_s",
    "max_body_mb",
    "max_output_mb",
    "max_message_chars",
    "max_connections",
    "header_timeout_s",
    "keep_alive_s",
)
# ServiceConfig's fields set otherwise
FLAG_OF_CONFIG = {"workflows": "WORKFLOWS", "store": "--store", "testbed": "--testbed"}


def serve_cmd(
    workflows: list[str] = WORKFLOWS,
    store: Path = STORE,
    host: str = HOST,
    port: int = PORT,
    testbed: o.TestbedKind = TESTBED,
    realtime: bool = REALTIME,
    time_scale: float = o.TIME_SCALE,
    vram_budget_mb: float | None = VRAM_BUDGET,
    placement: str = PLACEMENT,
    token_file: Path | None = o.TOKEN_FILE,
    insecure: bool = INSECURE,
    max_concurrency: int = MAX_CONCURRENCY,
    task_timeout_s: float | None = o.TASK_TIMEOUT,
    drain_s: float = DRAIN_S,
    policy: str | None = POLICY,
    round_size: int = o.ROUND_SIZE,
    seed: int = o.SEED,
    size: o.Size = o.SIZE,
    cpu_slots: int | None = o.CPU_SLOTS,
    ray_address: str | None = o.RAY_ADDRESS,
    emulate_gpu: bool = o.EMULATE_GPU,
    cards: str | None = o.CARDS,
    log_level: LogLevel = LOG_LEVEL,
    access_log: bool = ACCESS_LOG,
    max_body_mb: float = MAX_BODY_MB,
    max_output_mb: float = MAX_OUTPUT_MB,
    max_message_chars: int = MAX_MESSAGE_CHARS,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    keep_alive_s: float = KEEP_ALIVE_S,
) -> None:
    """Serve workflows over HTTP: concurrent invocations, warm tools, one learner per workflow."""
    values = {name: value for name, value in locals().items() if name in CONFIG_PARAMS}
    try:
        from agentsched.service.config import ServiceConfig
        from agentsched.service.server import read_token, serve
    except ModuleNotFoundError as e:
        raise AgentschedError(
            f"serve needs the serve extra ({e.name} is missing): pip install 'agentsched[serve]'"
        ) from None
    token = read_token(token_file) if token_file is not None else None
    spec = testbed_spec(
        testbed,
        seed=seed,
        size=size,
        cpu_slots=cpu_slots,
        task_timeout_s=task_timeout_s,
        ray_address=ray_address,
        emulate_gpu=emulate_gpu,
    )
    try:
        config = ServiceConfig(workflows=tuple(workflows), store=store, testbed=spec, **values)
    except FieldError as e:  # named by its flag, from the field the error carries
        raise by_flag(e, {**{k: "--" + k.replace("_", "-") for k in CONFIG_PARAMS}, **FLAG_OF_CONFIG}) from None
    say_on_stderr(log_level.value)
    code = serve(
        config,
        host=host,
        port=port,
        token=token,
        insecure=insecure,
        log_level=log_level.value,
        access_log=access_log,
        exit_after_cut=True,
    )
    raise SystemExit(code)


def say_on_stderr(log_level: str) -> None:
    """The service's lines (what it serves, its drain, cut and stop; a line per request) on stderr,
    at INFO unless ``log_level`` asks for less (the command's process: its logging is the CLI's)."""
    import logging
    import sys

    root = logging.getLogger("agentsched")
    if not any(getattr(h, "agentsched_serve", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("agentsched serve: %(message)s"))
        handler.agentsched_serve = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    quiet = log_level in ("error", "critical")
    root.setLevel(logging.getLevelName(log_level.upper()) if quiet else logging.INFO)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
