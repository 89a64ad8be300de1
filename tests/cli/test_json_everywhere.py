"""`--json` prints JSON on stdout in every command (README, docs/json.md), help lists a flag without a
value type (`--json`, not `--json <bool>`: a flag takes no value), and the documents docs/json.md
describes field by field have exactly the fields it lists (tests/support/json_doc.py)."""

from __future__ import annotations

import json

import pytest
import typer

from agentsched.cli.main import app
from tests.support import json_doc
from tests.support.echo_tool import ECHO_TOOLS

# commands that print no result document: llm-serve and serve serve an endpoint until Ctrl-C/SIGTERM
NO_DOCUMENT = {"llm-serve", "serve"}

TOOLS = ECHO_TOOLS

# the docs/json.md section (its heading's start) that lists each document field by field; loadgen's is
# checked in tests/service/test_loadgen_served.py (it needs a running service)
SECTIONS = {
    "load": "`agentsched load ",
    "loadgen": "`agentsched loadgen ",
    "throughput": "`agentsched throughput ",
    "invoke": "`agentsched invoke WORKFLOW --json`",
    "invoke --inputs-jsonl": "`agentsched invoke WORKFLOW --inputs-jsonl ",
    "history": "`agentsched history WORKFLOW --json`",
    "history --best": "`agentsched history WORKFLOW --best ",
    "store list": "`agentsched store list ",
    "store forget": "`agentsched store forget ",
    "store export": "`agentsched store export ",
    "store vacuum": "`agentsched store vacuum ",
}


def _commands() -> dict[str, typer.main.click.Command]:
    return dict(typer.main.get_command(app).commands)


def _argv(name: str, tmp) -> list[str] | None:
    """A cheap call of command ``name`` (None: needs an extra this machine lacks)."""
    echo = str(tmp / "echo.yaml")
    store = str(tmp / "s.db")
    table = {
        "scenarios": [],
        "show": ["S1"],
        "simulate": ["S1", "--mapping", "A=cpu,B=cpu,C=cpu,D=cpu"],
        "oracle": ["S1"],
        "calibrate": [],
        "policies": [],
        "tools": [],
        "prompt": ["S1"],
        "run": ["S1", "-p", "heft", "--rounds", "1", "--repeats", "1"],
        "bench": [
            "--scenarios",
            "S1",
            "--policies",
            "heft",
            "--seeds",
            "1",
            "--rounds",
            "1",
            "--repeats",
            "1",
            "--no-ablation",
            "--out",
            str(tmp / "bench"),
        ],
        "ablation": ["S1", "--rounds", "1", "--repeats", "1", "--seeds", "1"],
        "agent-check": [
            "S1",
            "--rounds",
            "2",
            "--repeats",
            "1",
            "--seeds",
            "1",
            "--start",
            "warm",
            "--baseline",
            "none",
        ],
        "generate": ["--out", str(tmp / "gen")],
        "invoke": [echo, "--store", store, "-i", "text=hi"],
        "history": ["echo", "--store", store],
        "profile": [
            "--tools",
            "groupby",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--busy",
            "ignore",
            "--out",
            str(tmp / "cards.json"),
        ],
        "throughput": ["S1", "-k", "1", "--batches", "1", "--cpu-slots", "1"],
        "load": [
            "S1",
            "--load",
            "0.3",
            "--duration-s",
            "10",
            "--seeds",
            "1",
            "--policies",
            "dmda",
            "--out",
            str(tmp / "load"),
            "--no-plot",
        ],
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
    lacking = [
        n for n, c in _leaves().items() if n not in NO_DOCUMENT and not any("--json" in p.opts for p in c.params)
    ]
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
            doc = json.loads(out)
        except ValueError:
            pytest.fail(f"agentsched {name} --json: stdout is not JSON: {out[:300]!r}")
        if name in SECTIONS:  # its fields are the ones docs/json.md lists
            json_doc.check(SECTIONS[name], doc)
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


def test_every_document_section_of_json_md_has_an_example_whose_fields_it_lists():
    for prefix in SECTIONS.values():
        assert json_doc.check_example(prefix) >= 1, prefix


def test_the_runtime_and_store_documents_have_the_fields_json_md_lists(cli, tmp_path, monkeypatch):
    """invoke (round, pinned, --inputs-jsonl), history (with a round observed), history --best and
    every store subcommand, on a workflow of one user tool."""
    (tmp_path / "json_echo_tools.py").write_text(TOOLS)
    (tmp_path / "echo.yaml").write_text('name: echo\ntasks:\n  A: {tool: "json_echo_tools:Echo"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    echo, store = str(tmp_path / "echo.yaml"), str(tmp_path / "s.db")

    def doc(*argv: str) -> dict:
        code, out, err = cli(*argv)
        assert code == 0, err
        return json.loads(out)

    for text in ("a", "b"):  # round size 1: the second invocation follows the observed round 0
        json_doc.check(
            SECTIONS["invoke"],
            doc("invoke", echo, "--store", store, "-i", f"text={text}", "--round-size", "1", "--json"),
        )
    pinned = doc("invoke", echo, "--store", store, "-i", "text=p", "--round-size", "1", "--mapping", "A=cpu", "--json")
    assert pinned["kind"] == "pinned" and pinned["round"] is None
    json_doc.check(SECTIONS["invoke"], pinned)
    (tmp_path / "in.jsonl").write_text('{"text": "c"}\n{"nope": 1}\n')
    code, out, err = cli(
        "invoke", echo, "--store", store, "--round-size", "1", "--inputs-jsonl", str(tmp_path / "in.jsonl")
    )
    assert code == 1, err  # the refused line
    ran, refused = (json.loads(line) for line in out.splitlines())
    json_doc.check(SECTIONS["invoke --inputs-jsonl"], ran)
    assert set(refused) == {"line", "status", "message"} and refused["status"] == "refused"
    assert set(refused) <= json_doc.documented(SECTIONS["invoke --inputs-jsonl"])

    history = doc("history", "echo", "--store", store, "--json")
    assert history["learners"][0]["rounds"] and history["learners"][0]["executions"]  # nothing left unchecked
    json_doc.check(SECTIONS["history"], history)
    json_doc.check(SECTIONS["history --best"], doc("history", "echo", "--store", store, "--best", "--json"))
    json_doc.check(SECTIONS["store list"], doc("store", "list", "--store", store, "--json"))
    json_doc.check(
        SECTIONS["store export"],
        doc("store", "export", "echo", "--out", str(tmp_path / "x.json"), "--store", store, "--json"),
    )
    json_doc.check(SECTIONS["store vacuum"], doc("store", "vacuum", "--store", store, "--json"))
    json_doc.check(SECTIONS["store forget"], doc("store", "forget", "echo", "--store", store, "--json"))


def test_a_field_the_doc_and_the_document_disagree_on_fails():
    doc = {"store": "s.db", "bytes_before": 1, "bytes_after": 1}
    json_doc.check(SECTIONS["store vacuum"], doc)
    with pytest.raises(AssertionError, match="written but not documented .'bytes_saved'"):
        json_doc.check(SECTIONS["store vacuum"], {**doc, "bytes_saved": 0})
    with pytest.raises(AssertionError, match="documented but not written .'bytes_after'"):
        json_doc.check(SECTIONS["store vacuum"], {"store": "s.db", "bytes_before": 1})
