"""Issue 13 item 3: task names follow one documented pattern (docs/workflows.md); anything else is a
one-line error at load, so every mapping `oracle` prints can be fed back to `simulate`."""

import json

import pytest

from agentsched.errors import WorkflowError
from agentsched.model.workflow import TASK_NAME_PATTERN
from agentsched.model.workflow_io import load_workflow_file

BAD = [
    "",
    "a=b",
    "a,b",
    "a b",
    "a\nb",
    "a\tb",
    "a\x01b",
    "ab\u202e",
    "\u202eA",
    "-a",
    ".a",
    "a" * 65,
    "任务",
    "A:B",
    "[bold",
    "a/b",
]
GOOD = ["A", "task_1", "a.b-c", "1", "_x", "a" * 64, "T-1.v2"]


def _write(tmp_path, tasks):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"name": "w", "tasks": tasks}))
    return p


@pytest.mark.parametrize("name", BAD)
def test_unsafe_task_names_are_one_line_errors(tmp_path, name):
    with pytest.raises(WorkflowError) as e:
        load_workflow_file(_write(tmp_path, {name: "clip"}))
    msg = str(e.value)
    assert "is not allowed (use 1-64 characters from A-Z a-z 0-9 _ . -" in msg
    assert "\n" not in msg and "\u202e" not in msg and "\x01" not in msg  # shown escaped, on one line


@pytest.mark.parametrize("name", GOOD)
def test_safe_task_names_load(tmp_path, name):
    wf = load_workflow_file(_write(tmp_path, {name: "clip", "B": "groupby"}))
    assert wf.task_ids == [name, "B"]


def test_the_pattern_is_the_documented_one():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "workflows.md").read_text()
    assert TASK_NAME_PATTERN in docs


def test_oracle_mappings_feed_back_to_simulate(cli, tmp_path):
    p = _write(tmp_path, {"a.b-c": "clip", "_2": "groupby", "X_y": "ocr"})
    code, out, err = cli("oracle", str(p), "--json", "--top", "1")
    assert code == 0, err
    best = json.loads(out)["top"][0]
    text = ",".join(f"{t}={m}" for t, m in best["mapping"].items())
    code, out, err = cli("simulate", str(p), "-m", text, "--noise", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["e2e_ms"] == best["e2e_ms"]


@pytest.mark.parametrize("name", ["ev\x1b]0;TITLE\x07il", "a\nb", "ab\u202e", "x\x00"])
def test_a_workflow_name_with_a_control_character_is_a_one_line_error(tmp_path, name):
    """(Names are free text, but one holding ESC sequences retitled and cleared the terminal.)"""
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"name": name, "tasks": {"A": "clip"}}))
    with pytest.raises(WorkflowError, match=r"holds a control character \(a name is one printable line\)") as e:
        load_workflow_file(p)
    assert "\x1b" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["S5", "my pipeline (v2)", "../../escape/évil", "任务"])
def test_a_printable_workflow_name_is_free_text(tmp_path, name):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"name": name, "tasks": {"A": "clip"}}))
    assert load_workflow_file(p).name == name
