"""Issue 13 item 9: `tools`, `--version`, one --json convention, docs references, plurals, and
one-line errors for `repeat: true`, duplicate edges, duplicate JSON keys and symlink loops."""

import json
import re
from pathlib import Path

import pytest

from agentsched import __version__
from agentsched.errors import CardError, WorkflowError
from agentsched.model.cards import load_card_set
from agentsched.model.text import plural
from agentsched.model.workflow_io import load_workflow_file

ROOT = Path(__file__).resolve().parents[2]


def test_tools_lists_the_19_with_family_gpu_and_the_extra(cli):
    code, out, err = cli("tools", "--json")
    assert code == 0, err
    doc = json.loads(out)
    names = [t["name"] for t in doc["tools"]]
    assert len(names) == 19 and names[0] == "sentiment" and names[-1] == "pdf_parser"
    assert {t["name"] for t in doc["tools"] if not t["gpu"]} == {"web_search", "log_analyzer", "pdf_parser"}
    assert {t["name"]: t["family"] for t in doc["tools"]}["clip"] == "vision"
    assert isinstance(doc["tools_extra_installed"], bool) and set(doc["packages"]) == {"torch", "transformers"}
    code, out, err = cli("tools")
    assert code == 0 and "no (host only)" in out and "tools extra: " in out


def test_version(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"agentsched {__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "S1", "-p", "heft", "--json", "out.json"),
        ("run", "S1", "-p", "heft", "--json=out.json"),
        ("ablation", "--json", "out.json"),
        ("agent-check", "S1", "--json", "x.JSON"),
    ],
)
def test_old_json_file_form_is_one_line_pointing_to_json_out(cli, argv):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "--json is a flag now (JSON on stdout); to write a file use --json-out" in err


def test_run_json_flag_prints_only_json_on_stdout(cli):
    code, out, err = cli("run", "S1", "-p", "heft", "--rounds", "2", "--repeats", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)  # nothing but the document
    assert doc["policy"] == "heft" and len(doc["rounds"]) == 2
    assert "R0" in err  # the text went to stderr


def test_docs_referenced_by_shipped_data_exist():
    refs = set()
    for p in (ROOT / "src" / "agentsched" / "data").rglob("*.json"):
        refs |= set(re.findall(r"docs/[\w.-]+\.md", p.read_text()))
    assert "docs/calibration.md" in refs
    for ref in refs:
        assert (ROOT / ref).is_file(), ref


def test_plural():
    assert plural(1, "seed") == "1 seed" and plural(0, "seed") == "0 seeds" and plural(5, "run") == "5 runs"
    assert plural(2, "policy", "policies") == "2 policies" and plural(1_000, "run") == "1,000 runs"


def test_one_seed_is_singular_in_agent_check(cli):
    code, out, err = cli(
        "agent-check", "S1", "--seeds", "1", "--rounds", "2", "--repeats", "1", "--baseline", "none", "--start", "warm"
    )
    assert "2 rounds x 1 run, 1 seed, world a5500 (" in out, out + err
    assert "1 seeds" not in out and "1 runs" not in out


@pytest.mark.parametrize("repeat", ["true", "false", "2.5", "'3'"])
def test_repeat_must_be_an_integer(tmp_path, repeat):
    p = tmp_path / "w.yaml"
    p.write_text(f"tasks: {{A: {{tool: clip, repeat: {repeat}}}}}\n")
    with pytest.raises(WorkflowError, match="tasks.A.repeat: Input should be a valid integer"):
        load_workflow_file(p)


def test_duplicate_edge_is_refused(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text("tasks: {A: clip, B: clip}\nedges: [[A, B], [A, B]]\n")
    with pytest.raises(WorkflowError, match=r"edge \[A, B\] is listed twice"):
        load_workflow_file(p)


def test_duplicate_json_keys_are_refused(tmp_path):
    p = tmp_path / "w.json"
    p.write_text('{"tasks": {"A": "clip", "A": "ocr"}}')
    with pytest.raises(WorkflowError, match=r"w\.json: invalid JSON: duplicate key 'A'"):
        load_workflow_file(p)
    c = tmp_path / "c.json"
    c.write_text('{"cards": {"x": {"cpu_ms": 1}}, "cards": {}}')
    with pytest.raises(CardError, match="invalid JSON: duplicate key 'cards'"):
        load_card_set(c)


def test_symlink_loop_and_dangling_link_outputs(cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    code, out, err = cli("bench", "--scenarios", "S1", "--policies", "heft", "--seeds", "1", "--out", str(a))
    assert code == 2 and err.splitlines() == [f"error: --out: {a} is a symlink loop"]
    code, out, err = cli("run", "S1", "-p", "heft", "--rounds", "1", "--json-out", str(a))
    assert code == 2 and err.splitlines() == [f"error: --json-out: {a} is a symlink loop"]
    d = tmp_path / "d"
    d.symlink_to(tmp_path / "nowhere" / "x")
    code, out, err = cli("bench", "--scenarios", "S1", "--policies", "heft", "--seeds", "1", "--out", str(d))
    assert code == 2 and err.splitlines() == [
        f"error: --out: {d} is a symlink to a missing target ({tmp_path / 'nowhere' / 'x'})"
    ]
