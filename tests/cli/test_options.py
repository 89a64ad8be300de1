"""The options several commands share (cli/options.py): each flag written once."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import typer
from typer.models import OptionInfo

from agentsched.cli import options
from agentsched.cli.common import FLAG_OF_FIELD
from agentsched.cli.main import app
from agentsched.testbeds.spec import TestbedSpec

CLI = Path(options.__file__).parent
# flags two or more commands once declared each inline (now in options.py, a variant where one differs)
MOVED = {
    "--json-out",
    "--store",
    "--policy",
    "-p",
    "--rounds",
    "--repeats",
    "--seeds",
    "--mapping",
    "-m",
    "--input",
    "-i",
    "--input-json",
    "--inputs-jsonl",
    "--rates",
    "--arrival",
    "--duration-s",
    "--vram-budget-mb",
    "--time-scale",
    "--token-file",
    "--round-size",
    "--out",
}
FLAG = re.compile(r"--?[a-zA-Z][\w-]*")


def _flags(command: str) -> set[str]:
    """The flags ``agentsched COMMAND`` accepts, as click parses them."""
    return {flag for p in typer.main.get_command(app).commands[command].params for flag in p.opts}


def _names(decl: str) -> list[str]:
    """'--x/--no-x' -> ['--x', '--no-x']."""
    return [part.strip() for part in decl.split("/") if part.strip()]


def _shared_flags() -> set[str]:
    """Every flag an Option in options.py declares."""
    return {
        flag
        for value in vars(options).values()
        if isinstance(value, OptionInfo)
        for decl in value.param_decls
        for flag in _names(decl)
    }


def _is_option(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        getattr(node.func, "attr", None) == "Option" or getattr(node.func, "id", None) == "Option"
    )


def _declared(source: str) -> Iterator[tuple[int, str]]:
    """(line, flag) of each ``typer.Option(...)`` call in ``source``: its flag strings, else the flag typer
    makes of the parameter's name (``seed: int = typer.Option(0)`` declares ``--seed`` too)."""
    tree = ast.parse(source)
    param_of: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = fn.args
            positional = a.posonlyargs + a.args
            pairs = [
                *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False),
                *zip(a.kwonlyargs, a.kw_defaults, strict=False),
            ]
            param_of.update({id(default): arg.arg for arg, default in pairs if default is not None})
    for call in filter(_is_option, ast.walk(tree)):
        decls = [
            n
            for c in call.args[1:]
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
            for n in _names(c.value)
        ]  # the first positional argument is the default
        if not decls and id(call) in param_of:
            decls = ["--" + param_of[id(call)].replace("_", "-")]
        yield from ((call.lineno, flag) for flag in decls)


def test_every_testbed_spec_field_names_a_flag_the_cli_accepts():
    assert set(FLAG_OF_FIELD) == set(TestbedSpec.model_fields)  # a new field needs its option
    accepted = _flags("run")  # run takes the whole spec
    assert {field: flag for field, flag in FLAG_OF_FIELD.items() if flag not in accepted} == {}
    assert FLAG_OF_FIELD["cpu_slots"] == "--cpu-slots" and FLAG_OF_FIELD["timeout_s"] == "--task-timeout-s"


def test_a_shared_flag_is_declared_only_in_options_py():
    """A command that means another default or help takes ``options.variant(SHARED, ...)``, never a
    second ``typer.Option`` under the same flag (which would drift from the shared one)."""
    shared = _shared_flags()
    assert {"--seed", "--testbed", "--cpu-slots", "--json", "--llm-model"} <= shared  # the scan sees options.py
    assert MOVED <= shared  # ... and the flags several commands declared inline before (so again is an error)
    again = [
        f"{path.name}:{line} {flag}"
        for path in sorted(CLI.glob("*.py"))
        if path.name != "options.py"
        for line, flag in _declared(path.read_text())
        if flag in shared
    ]
    assert again == []


def test_the_scan_sees_flags_written_or_implied():
    source = (
        'def cmd(a: int = typer.Option(0, "--seed", "-s"), seed: int = typer.Option(1, help="x"),\n'
        '        p: bool = typer.Option(False, "--x/--no-x")): ...\n'
    )
    assert sorted(flag for _, flag in _declared(source)) == ["--no-x", "--seed", "--seed", "--x", "-s"]


def test_options_py_writes_each_flag_once():
    """No table beside the options repeating their flags (LLM_FLAGS is derived from the Options)."""
    tree = ast.parse((CLI / "options.py").read_text())
    written = Counter(
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and all(FLAG.fullmatch(n) for n in _names(node.value))
        and _names(node.value)
        for name in _names(node.value)
    )
    assert {flag: n for flag, n in written.items() if n > 1} == {}
    assert set(options.LLM_FLAGS.values()) <= _flags("run") and options.LLM_FLAGS["timeout_s"] == "--llm-timeout"


def test_a_variant_keeps_the_flag_and_changes_only_what_it_is_given():
    v = options.variant(options.CPU_SLOTS, default=16, help="slots")
    assert (v.param_decls, v.default, v.help) == (options.CPU_SLOTS.param_decls, 16, "slots")
    assert options.CPU_SLOTS.default is None and options.CPU_SLOTS.help == options.CPU_SLOTS_HELP  # untouched
    kept = options.variant(options.SEED, help="other")
    assert (kept.default, kept.help) == (0, "other")


def test_a_variant_may_add_a_short_name_and_leaves_the_shared_option_alone():
    v = options.variant(options.OUT, short="-o")
    assert v.param_decls == ("--out", "-o") and options.OUT.param_decls == ("--out",)
    assert options.MAPPING_M.param_decls == ("--mapping", "-m") and options.MAPPING.param_decls == ("--mapping",)


def test_the_moved_flags_keep_their_short_names_and_required_ness():
    """invoke's --mapping never had -m; simulate, profile, store export and loadgen's flags stay required."""
    params = {name: {p.name: p for p in cmd.params} for name, cmd in typer.main.get_command(app).commands.items()}
    assert params["invoke"]["mapping"].opts == ["--mapping"]
    assert params["simulate"]["mapping"].opts == params["throughput"]["mapping"].opts == ["--mapping", "-m"]
    assert params["profile"]["out"].opts == ["--out", "-o"] and params["profile"]["out"].required
    assert params["simulate"]["mapping"].required and params["serve"]["store"].required
    assert params["loadgen"]["rates"].required and not params["load"]["rates"].required
    assert {c: params[c]["seeds"].default for c in ("bench", "ablation", "agent-check", "load")} == {
        "bench": 5,
        "ablation": 5,
        "agent-check": 3,
        "load": 3,
    }
    export = typer.main.get_command(app).commands["store"].commands["export"]
    assert next(p for p in export.params if p.name == "out").required
