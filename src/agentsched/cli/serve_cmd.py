"""Command: serve (the placement service over HTTP; docs/serve.md). Needs the ``serve`` extra."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from agentsched.cli import options as o
from agentsched.cli.common import testbed_spec
from agentsched.errors import AgentschedError


class LogLevel(str, Enum):
    """uvicorn's log levels (a bad one was an internal error at start: uvicorn's KeyError)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"
    TRACE = "trace"


def serve_cmd(
    workflows: list[str] = typer.Argument(..., help="workflow files, folders of them, or scenario names"),
    # a service names its one store, for every workflow's learner: required
    store: Path = o.variant(o.STORE, default=..., help="SQLite store of every workflow's learner (created when "
                                                       "missing)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (loopback by default)"),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free one, printed at start)"),
    # a service runs the real tools by default: sim needs profiled cards
    testbed: o.TestbedKind = o.variant(o.TESTBED, default=o.TestbedKind.LOCAL, help="local (real tools, default), "
                                       "ray or sim (sim needs profiled cards)"),
    realtime: bool = typer.Option(False, "--realtime", help="sim: tools sleep their simulated durations "
                                  "(load tests without a GPU) on one shared simulated machine"),
    time_scale: float = o.TIME_SCALE,
    # --realtime only, and a service fits the smallest budget its workflows name (load: the largest)
    vram_budget_mb: Optional[float] = o.variant(o.VRAM_BUDGET_MB, help="--realtime: the shared GPU's VRAM budget "
                                                "(default: the smallest the workflows name; none if none)"),
    placement: str = typer.Option("policy", "--placement", help="policy: each workflow's policy picks a mapping "
                                  "per invocation; live (local, or sim --realtime): each task placed when ready by "
                                  "the load-aware planner over the machine's live state (every invocation in "
                                  "flight, the VRAM budget, the CPU slots)"),
    token_file: Optional[Path] = o.TOKEN_FILE,
    insecure: bool = typer.Option(False, "--insecure", help="allow a non-loopback --host without --token-file"),
    max_concurrency: int = typer.Option(64, "--max-concurrency", help="invocations accepted at once (more: 503)"),
    task_timeout_s: Optional[float] = o.TASK_TIMEOUT,
    drain_s: float = typer.Option(30.0, "--drain-s", help="SIGTERM: seconds in-flight invocations may take"),
    # an online policy, one learner per served workflow
    policy: Optional[str] = o.variant(o.POLICY, help=f"online policy of every workflow ({o.POLICY_DEFAULT_HELP})"),
    round_size: int = o.ROUND_SIZE,
    seed: int = o.SEED,
    size: o.Size = o.SIZE,
    cpu_slots: Optional[int] = o.CPU_SLOTS,
    ray_address: Optional[str] = o.RAY_ADDRESS,
    emulate_gpu: bool = o.EMULATE_GPU,
    cards: Optional[str] = o.CARDS,
    log_level: LogLevel = typer.Option(LogLevel.WARNING, "--log-level", case_sensitive=False,
                                       help="uvicorn's log level"),
) -> None:
    """Serve workflows over HTTP: concurrent invocations, warm tools, one learner per workflow."""
    try:
        from agentsched.service.server import read_token, serve
        from agentsched.service.service import ServiceConfig
    except ModuleNotFoundError as e:
        raise AgentschedError(f"serve needs the serve extra ({e.name} is missing): "
                              "pip install 'agentsched[serve]'") from None
    token = read_token(token_file) if token_file is not None else None
    spec = testbed_spec(testbed, seed=seed, size=size, cpu_slots=cpu_slots, task_timeout_s=task_timeout_s,
                        ray_address=ray_address, emulate_gpu=emulate_gpu)
    config = ServiceConfig(workflows=tuple(workflows), store=store, testbed=spec, realtime=realtime,
                           time_scale=time_scale, vram_budget_mb=vram_budget_mb, policy=policy, placement=placement,
                           round_size=round_size, seed=seed, cards=cards, max_concurrency=max_concurrency,
                           drain_s=drain_s)
    raise SystemExit(serve(config, host=host, port=port, token=token, insecure=insecure, log_level=log_level.value,
                           exit_after_cut=True))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
