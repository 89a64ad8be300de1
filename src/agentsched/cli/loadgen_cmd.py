"""Command: loadgen (the arrival stream of ``agentsched load``, fired open-loop at a running service)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from agentsched.cli import options as opt
from agentsched.errors import AgentschedError


def loadgen_cmd(
    url: str = typer.Argument(..., help="the service, e.g. http://127.0.0.1:8000"),
    workflows: list[str] = typer.Argument(..., help="the mix: names of served workflows (GET /v1/workflows)"),
    rates: str = opt.RATES,
    arrival: str = opt.ARRIVAL,
    duration_s: float = opt.DURATION_S,
    # the arrival stream's seed (no testbed or policy here: the service has its own)
    seed: int = opt.variant(opt.SEED, help="the stream's seed (stream SEED of `agentsched load --seeds`)"),
    # the client side: the server's clock, adopted from its /healthz unless given
    time_scale: float | None = opt.variant(
        opt.TIME_SCALE,
        default=None,
        help="the server's --time-scale "
        "(simulated ms per wall ms); default: the one the service reports at "
        "/healthz (1 for real tools); a value it contradicts is replaced by "
        "the service's, with a note",
    ),
    # the client side: the token it sends
    token_file: Path | None = opt.variant(opt.TOKEN_FILE, help="file holding the service's bearer token"),
    # sent with every invocation of the stream
    input_: list[str] | None = opt.variant(
        opt.INPUT,
        help="NAME=VALUE sent with every invocation (repeatable; text): the inputs a workflow of user tools takes",
    ),
    input_json: Path | None = opt.variant(
        opt.INPUT_JSON, help="JSON object of NAME: VALUE sent with every invocation (--input items override it)"
    ),
    json_out: bool = opt.JSON,
    json_file: str = opt.JSON_OUT,
) -> None:
    """Send an arrival stream to `agentsched serve` at its scheduled times (open loop) and report
    the latency percentiles the clients saw, in simulated ms. Exits 1 when the service ran no
    arrival of a rate (none answered ok or oom), naming the first failure; a rate whose stream has
    no arrival is refused before anything is sent."""
    from agentsched.cli.load_cmd import _floats
    from agentsched.cli.output import check_output_file, emit
    from agentsched.experiments.loadgen import run_against, summarize_shots
    from agentsched.experiments.traffic import seeded_arrivals

    try:
        import httpx  # noqa: F401 - the serve extra's client
    except ModuleNotFoundError:
        raise AgentschedError("loadgen needs httpx (the serve extra): pip install 'agentsched[serve]'") from None
    token = None
    if token_file is not None:
        from agentsched.service.server import read_token

        token = read_token(token_file)
    from agentsched.cli.runtime_cmds import parse_inputs

    inputs = parse_inputs(input_ or [], input_json)
    rate_list = _floats(rates, "--rates") or []
    if json_file is not None:
        check_output_file(json_file, "--json-out")  # before the stream, not after it
    _check_served(url, workflows, token)
    time_scale = _time_scale(url, time_scale)
    streams = [(rate, seeded_arrivals(arrival, rate, duration_s, workflows, seed)) for rate in rate_list]
    empty = [f"{rate:g}" for rate, arrivals in streams if not arrivals]
    if empty:  # nothing to send would measure nothing: said before any arrival is sent
        raise AgentschedError(
            f"the stream has no arrival at rate(s) {', '.join(empty)} in {duration_s:g} s: raise "
            f"--duration-s or the rate"
        )
    rows: list[dict[str, Any]] = []
    for rate, arrivals in streams:
        shots = run_against(url, arrivals, workflows, time_scale=time_scale, token=token, inputs=inputs)
        rows.append({"rate_per_s": rate, **summarize_shots(shots)})
    from agentsched.masking import redact_url

    doc = {
        "url": redact_url(url),
        "workflows": list(workflows),
        "arrival": arrival,
        "duration_s": duration_s,
        "seed": seed,
        "time_scale": time_scale,
        "rows": rows,
    }
    emit(doc, _table(rows), json_out=json_out, json_file=json_file)
    _fail_when_none_ran(rows)


def _check_served(url: str, names: list[str], token: str | None) -> None:
    """One line when the service is unreachable or does not serve a workflow of the mix."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.get(url.rstrip("/") + "/v1/workflows", headers=headers, timeout=30)
    except httpx.HTTPError as e:
        raise AgentschedError(f"cannot reach the service at {url}: {type(e).__name__}: {e}") from None
    if r.status_code != 200:
        raise AgentschedError(f"{url}/v1/workflows answered HTTP {r.status_code}: {_first_line(r.text)}")
    served = _served_names(r)
    if served is None:  # another kind of server's answer: one line, not an AttributeError
        raise AgentschedError(
            f"{url} is not an agentsched service: GET /v1/workflows answered "
            f"{_first_line(r.text)!r}, not a list of workflows"
        )
    missing = [n for n in names if n not in served]
    if missing:
        raise AgentschedError(
            f"the service does not serve {', '.join(missing)} (it serves {', '.join(sorted(str(s) for s in served))})"
        )


def _time_scale(url: str, given: float | None) -> float:
    """The scale of the service's clock, which every latency is converted with: the one its
    /healthz reports (a stream at another would be 10x off, the overhead negative), else ``given``,
    else 1. A ``given`` the service contradicts is replaced, said in one note on stderr."""
    import httpx

    if given is not None and not (math.isfinite(given) and given > 0):
        raise AgentschedError(f"--time-scale must be a finite number > 0, got {given:g}")
    try:
        served = httpx.get(url.rstrip("/") + "/healthz", timeout=30).json().get("time_scale")
    except (httpx.HTTPError, ValueError, AttributeError):
        served = None
    ok = isinstance(served, (int, float)) and not isinstance(served, bool) and math.isfinite(served) and served > 0
    if not ok:  # a service that does not say (an older one) is taken at the caller's word
        return given if given is not None else 1.0
    if given is not None and not math.isclose(served, given, rel_tol=1e-9):
        typer.echo(
            f"note: the service runs at --time-scale {served:g} (simulated ms per wall ms), not {given:g}: "
            f"the stream uses {served:g}",
            err=True,
        )
    return float(served)


def _served_names(r: Any) -> set[str] | None:
    """The workflow names of an agentsched ``GET /v1/workflows`` answer; None for anything else."""
    try:
        doc = r.json()
    except ValueError:
        return None
    if not isinstance(doc, list) or not all(isinstance(w, dict) and isinstance(w.get("name"), str) for w in doc):
        return None
    return {w["name"] for w in doc}


def _first_line(text: str, limit: int = 120) -> str:
    """The first non-blank line of a body, cut at ``limit`` characters, terminal control escaped (an
    HTML error page quoted whole made a multi-line error)."""
    from agentsched.masking import printable

    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return printable(line[:limit] + ("..." if len(line) > limit else ""))


def _fail_when_none_ran(rows: list[dict[str, Any]]) -> None:
    """The figures are printed; a rate of which the service ran no arrival is the exit status (1, as
    a failed run's), with one line naming the rate(s) and the first failure."""
    from agentsched.experiments.loadgen import RAN, none_ran

    failed = [r for r in rows if none_ran(r)]
    if failed:
        rates = ", ".join(f"{r['rate_per_s']:g}" for r in failed)
        from agentsched.masking import redact_url

        # through redact_url: a failure's text may quote the URL, credentials and all
        typer.echo(
            redact_url(
                f"error: no arrival answered {' or '.join(RAN)} at rate(s) {rates}; the first "
                f"failure: {failed[0]['first_failure']}"
            ),
            err=True,
        )
        raise SystemExit(1)


def _table(rows: list[dict[str, Any]]) -> str:
    def f(x: Any) -> str:
        return "-" if x is None else f"{x:,.1f}" if isinstance(x, float) else str(x)

    lines = [
        "| rate/s | sent | ok | oom | error | refused | no answer | other | p50 ms | p95 ms | p99 ms | "
        "server E2E p50 | overhead ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rate_per_s']:g} | {r['sent']} | {r['ok']} | {r['oom']} | {r['error']} | {r['refused']} | "
            f"{r['no-answer']} | {r['other']} | {f(r['p50_ms'])} | {f(r['p95_ms'])} | {f(r['p99_ms'])} | "
            f"{f(r['e2e_p50_ms'])} | {f(r['overhead_ms_mean'])} |"
        )
    # why: a stream the service refused wholesale (422: a missing --input) showed only zeros
    lines += [
        f"rate {r['rate_per_s']:g}: {r['sent'] - r['ok']} not ok; the first: {r['first_failure']}"
        for r in rows
        if r["first_failure"]
    ]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("loadgen")(loadgen_cmd)
