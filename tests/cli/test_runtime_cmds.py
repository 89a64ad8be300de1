"""invoke/history as a new user meets them: errors before any work, in one line; honest wording."""

from __future__ import annotations

import sqlite3
import textwrap
import threading

import pytest

TOOLS = textwrap.dedent("""
    import agentsched


    class Echo(agentsched.Tool):
        name = "echo"
        workload = "return the docs"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("docs",)

        def run(self, inputs):
            return inputs["docs"]
""")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "rtfix_tools.py").write_text(TOOLS)
    (tmp_path / "echo.yaml").write_text('name: echo\ntasks:\n  A: {tool: "rtfix_tools:Echo"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _invoke(cli, project, *extra: str):
    return cli("invoke", str(project / "echo.yaml"), "--store", str(project / "s.db"), "--cpu-slots", "1", *extra)


def test_history_plot_format_is_checked_before_the_table(project, cli):
    code, _, err = _invoke(cli, project, "--input", "docs=a")
    assert code == 0, err
    code, out, err = cli("history", "echo", "--store", str(project / "s.db"), "--plot", str(project / "c.txt"))
    assert code != 0 and out == ""  # nothing printed before the error
    assert err.splitlines() == [f"error: --plot {project / 'c.txt'}: unsupported format (use .png, .svg, .pdf)"]
    code, _, err = cli("history", "echo", "--store", str(project / "s.db"), "--plot", str(project / "no" / "c.png"))
    missing = project / "no"
    assert code != 0 and err.splitlines() == [f"error: --plot {missing / 'c.png'}: folder {missing} does not exist"]


def test_history_counts_are_singular_for_one(project, cli):
    code, _, err = _invoke(cli, project, "--input", "docs=a", "--round-size", "1")
    assert code == 0, err
    code, out, err = cli("history", "echo", "--store", str(project / "s.db"))
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.startswith("learner "))
    assert head.endswith(": 1 invocation (0 probes), 1 round observed"), head


def test_a_repeated_input_name_is_an_error(project, cli):
    code, out, err = _invoke(cli, project, "--input", "docs=a", "--input", "docs=b")
    assert code != 0 and out == ""
    assert err.splitlines() == ["error: --input 'docs' is given more than once (give each input once)"]
    assert not (project / "s.db").exists()  # refused before the store was opened


def test_an_input_in_the_json_file_and_on_the_line_is_an_error(project, cli):
    given = project / "in.json"
    given.write_text('{"docs": "a"}')
    code, out, err = _invoke(cli, project, "--input-json", str(given), "--input", "docs=b")
    assert code != 0 and out == ""
    assert err.splitlines() == [f"error: --input 'docs' is given by --input-json {given} too (give each input once)"]


def test_invoke_announces_a_store_lock_wait(project, cli, monkeypatch):
    from agentsched.store import Store
    from agentsched.store import database as store_mod

    db = project / "s.db"
    Store(db).close()
    monkeypatch.setattr(store_mod, "WAIT_NOTICE_S", 0.1)  # the injected threshold (2 s by default)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction
    release = threading.Timer(1.0, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        code, out, err = _invoke(cli, project, "--input", "docs=a")
    finally:
        release.join()
        holder.close()
    assert code == 0, err
    assert err.splitlines() == [f"waiting for the store {db} (locked by another process) for up to 30 s ..."]
    assert 'output A: "a"' in out


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deeply_nested_input_json_is_one_line(project, cli, depth):
    f = project / "in.json"
    f.write_text('{"docs": ' + "[" * depth + "]" * depth + "}")
    code, out, err = _invoke(cli, project, "--input-json", str(f))
    assert code == 2 and out == ""
    assert err.splitlines() == [f"error: --input-json {f}: nested deeper than 100 levels"]


def test_an_unknown_input_name_is_named(project, cli):
    code, out, err = _invoke(cli, project, "--input", "txt=hi")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: invocation input 'txt' is not an input of workflow echo (its source tasks take: docs)"
    ]
    assert not (project / "s.db").exists()  # refused before the store was opened


def test_run_says_it_gives_no_inputs_to_a_workflow_whose_source_tool_takes_some(project, cli):
    """Before, run (which gives no inputs) ran it silently: every execution failed in the tool."""
    code, out, err = cli(
        "run", str(project / "echo.yaml"), "--testbed", "local", "--rounds", "1", "--repeats", "1", "--no-oracle"
    )
    assert (
        "note: run gives a workflow no inputs, but source task A (rtfix_tools:Echo) takes docs: use agentsched "
        "invoke --input NAME=VALUE (or --inputs-jsonl FILE)"
    ) in (out + err).splitlines()
    # the simulator never calls the tools: run on it as before (from profiled cards)
    (project / "cards.json").write_text(
        '{"name": "c", "source": "test", "cards": {"rtfix_tools:Echo": {"name": "rtfix_tools:Echo", "cpu_ms": 5.0}}}'
    )
    code, _, err = cli(
        "run",
        str(project / "echo.yaml"),
        "--testbed",
        "sim",
        "--cards",
        str(project / "cards.json"),
        "--rounds",
        "1",
        "--policy",
        "heft",
    )
    assert code == 0, err


NOISY = textwrap.dedent("""
    import pathlib

    import agentsched

    print("imported!")  # a side effect on stdout
    pathlib.Path("imported.marker").write_text("x")


    class Loud(agentsched.Tool):
        name = "loud"
        workload = "say it"
        has_gpu = False

        def run(self, inputs):
            return 1
""")


def test_show_never_imports_user_tool_modules(project, cli, monkeypatch):
    import json
    import sys

    (project / "noisy_tools.py").write_text(NOISY)
    (project / "noisy.yaml").write_text('name: noisy\ntasks:\n  A: {tool: "noisy_tools:Loud"}\n')
    monkeypatch.chdir(project)
    code, out, err = cli("show", str(project / "noisy.yaml"), "--json")
    assert code == 0, err
    doc = json.loads(out)  # nothing else on stdout
    assert doc["tasks"]["A"]["name"] == "noisy_tools:Loud"
    assert "not imported" in doc["tasks"]["A"]["workload"]
    assert "noisy_tools" not in sys.modules and not (project / "imported.marker").exists()
    code, out, err = cli("show", str(project / "noisy.yaml"))
    assert code == 0 and "imported!" not in out and "noisy_tools:Loud" in out


def test_history_of_a_workflow_file_never_imports_its_tool_modules(project, cli):
    """Before, history imported them to learn the workflow's name: a module that exits on import (or is
    not on the path there) ended the command with no output."""
    import sys

    assert _invoke(cli, project, "-i", "docs=x")[0] == 0
    (project / "rtfix_tools.py").write_text("import sys\nsys.exit(5)\n")
    sys.modules.pop("rtfix_tools", None)
    code, out, err = cli("history", str(project / "echo.yaml"), "--store", str(project / "s.db"), "--best")
    assert code == 0, err
    assert out.startswith("learner 1 (agent-plan-cold): ") and "rtfix_tools" not in sys.modules


def test_history_plot_before_the_first_full_round_says_so(project, cli):
    code, _, err = _invoke(cli, project, "--input", "docs=a", "--round-size", "3")
    assert code == 0, err
    plot = project / "curve.png"
    code, out, err = cli("history", "echo", "--store", str(project / "s.db"), "--plot", str(plot))
    assert code == 0, err
    assert not plot.exists()
    assert "no learning curve written: no round of echo has completed yet (a round is 3 invocations)" in out


def test_runtime_results_carry_plain_strings(project):
    from agentsched import Runtime
    from agentsched.scenarios import resolve_workflow

    with Runtime(resolve_workflow(str(project / "echo.yaml")), store=None) as rt:
        r = rt.invoke(docs="a")
    text = repr(r)
    assert "<Mode." not in text and "<Status." not in text
    assert "mapping={'A': 'cpu'}" in text and "status='ok'" in text
    assert r.mapping == {"A": "cpu"} and r.status == "ok"


def test_invoke_without_store_says_it_creates_one_in_the_current_folder(project, cli, monkeypatch):
    monkeypatch.chdir(project)
    code, _, err = cli("invoke", "echo.yaml", "--cpu-slots", "1", "--input", "docs=a")
    assert code == 0, err
    assert "created store agentsched.db (it keeps what invoke learns; --store chooses another)" in err.splitlines()
    assert (project / "agentsched.db").is_file()
    code, _, err = cli("invoke", "echo.yaml", "--cpu-slots", "1", "--input", "docs=b")
    assert code == 0 and "created store" not in err  # said once, when it appears


def test_a_single_local_invocation_says_its_e2e_includes_the_first_call_warm_up(project, cli):
    from agentsched.cli.runtime_cmds import WARM_UP_NOTE

    code, out, err = _invoke(cli, project, "--input", "docs=a")
    assert code == 0, err
    assert WARM_UP_NOTE in out.splitlines() and "first call" in WARM_UP_NOTE
    code, out, err = cli("invoke", "S5", "--testbed", "sim", "--store", str(project / "sim.db"))
    assert code == 0 and WARM_UP_NOTE not in out  # a simulated run has no warm-up
