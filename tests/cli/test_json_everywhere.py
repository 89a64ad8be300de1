"""`--json` prints JSON on stdout in every command (README, docs/json.md), and help lists a flag
without a value type (`--json`, not `--json <bool>`: a flag takes no value)."""

from __future__ import annotations

import json

import pytest
from tests.support.echo_tool import ECHO_TOOLS
import typer

from agentsched.cli.main import app

# commands that print no result document: llm-serve and serve serve an endpoint until Ctrl-C/SIGTERM
NO_DOCUMENT = {"llm-serve", "serve"}

TOOLS = ECHO_TOOLS


def _commands() -> dict[str, typer.main.click.Command]:
    return dict(typer.main.get_command(app).commands)


def _argv(name: str, tmp) -> list[str] | None:
    """A cheap call of command ``name`` (None: needs an extra this machine lacks)."""
    echo = str(tmp / "echo.yaml")
    store = str(tmp / "s.db")
    table = {
        "scenarios": [], "show": ["S1"], "simulate": ["S1", "--mapping", "A=cpu,B=cpu,C=cpu,D=cpu"],
        "oracle": ["S1"], "calibrate": [], "policies": [], "tools": [], "prompt": ["S1"],
        "run": ["S1", "-p", "heft", "--rounds", "1", "--repeats", "1"],
        "bench": ["--scenarios", "S1", "--policies", "heft", "--seeds", "1", "--rounds", "1", "--repeats", "1",
                  "--no-ablation", "--out", str(tmp / "bench")],
        "ablation": ["S1", "--rounds", "1", "--repeats", "1", "--seeds", "1"],
        "agent-check": ["S1", "--rounds", "2", "--repeats", "1", "--seeds", "1", "--start", "warm",
                        "--baseline", "none"],
        "generate": ["--out", str(tmp / "gen")],
        "invoke": [echo, "--store", store, "-i", "text=hi"],
        "history": ["echo", "--store", store],
        "profile": ["--tools", "groupby", "--runs", "1", "--warmup", "0", "--busy", "ignore",
                    "--out", str(tmp / "cards.json")],
        "throughput": ["S1", "-k", "1", "--batches", "1", "--cpu-slots", "1"],
        "load": ["S1", "--load", "0.3", "--duration-s", "10", "--seeds", "1", "--policies", "dmda",
                 "--out", str(tmp / "load"), "--no-plot"],
    }
    if name == "loadgen":  # needs a running service: tests/service/test_loadgen_served.py checks its --json
        return None
    if name == "profile":
        from agentsched.tools import tools_installed

        if not tools_installed():
            return None
    if name == "throughput":
        from agentsched.testbeds.ray import ray_installed

        if not ray_installed():
            return None
    return table[name]


def _leaves() -> dict[str, typer.main.click.Command]:
    """Every command, a group's as ``group sub`` (``store list``)."""
    out = {}
    for n, c in _commands().items():
        subs = getattr(c, "commands", None)
        out.update({f"{n} {s}": sc for s, sc in subs.items()} if subs else {n: c})
    return out


def test_every_command_that_prints_a_result_takes_json():
    lacking = [n for n, c in _leaves().items()
               if n not in NO_DOCUMENT and not any("--json" in p.opts for p in c.params)]
    assert lacking == []


def test_json_prints_json_on_stdout_in_every_command(cli, tmp_path, monkeypatch):
    (tmp_path / "json_echo_tools.py").write_text(TOOLS)
    (tmp_path / "echo.yaml").write_text('name: echo\ntasks:\n  A: {tool: "json_echo_tools:Echo"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    order = sorted(_commands(), key=lambda n: n == "history")  # history reads what invoke stored
    checked = []
    for name in order:
        if name in NO_DOCUMENT or not any("--json" in p.opts for p in _commands()[name].params):
            continue
        argv = _argv(name, tmp_path)
        if argv is None:
            continue
        code, out, err = cli(name, *argv, "--json")
        assert code in (0, 1), f"{name}: {err}"  # agent-check: 1 when a seed missed the oracle
        try:
            json.loads(out)
        except ValueError:
            pytest.fail(f"agentsched {name} --json: stdout is not JSON: {out[:300]!r}")
        checked.append(name)
    assert {"policies", "prompt", "generate", "bench", "run", "invoke", "history"} <= set(checked)


def test_help_shows_no_value_type_after_a_flag(cli):
    for name in [None, *_commands()]:
        code, out, _ = cli(*([name] if name else []), "--help")
        assert code == 0
        assert "<bool>" not in out, name


def test_throughput_help_names_the_ray_testbed_only(cli):
    code, out, _ = cli("throughput", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "sim" not in text.replace("simultaneous", "") and "worker pool" not in text
    assert "<ray>" in text


def test_profile_tools_help_shows_the_user_tool_form(cli):
    code, out, _ = cli("profile", "--help")
    assert code == 0 and "package.module:Class" in " ".join(out.split())
