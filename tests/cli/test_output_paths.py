"""cli/output.py: output files and folders are checked before the work, written after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsched.cli.output import check_output_file, prepare_output_dir, write_json
from agentsched.errors import AgentschedError


def test_check_output_file_leaves_nothing_and_keeps_an_existing_file(tmp_path):
    new = tmp_path / "new.json"
    assert check_output_file(new, "--json") == new and not new.exists()
    old = tmp_path / "old.json"
    old.write_text("keep me")
    check_output_file(old, "--json")
    assert old.read_text() == "keep me"


def test_check_output_file_errors(tmp_path):
    with pytest.raises(AgentschedError) as e:
        check_output_file(tmp_path / "no" / "x.json", "--json")
    assert str(e.value) == f"--json: folder {tmp_path / 'no'} does not exist"
    with pytest.raises(AgentschedError) as e:
        check_output_file(tmp_path, "--out")
    assert str(e.value) == f"--out: {tmp_path} is a folder"
    made = tmp_path / "a" / "b" / "x.json"
    check_output_file(made, "--out", create_parent=True)
    assert made.parent.is_dir() and not made.exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_unwritable_places_are_one_line_errors():
    with pytest.raises(AgentschedError, match=r"^--json: cannot write /proc/x\.json: "):
        check_output_file("/proc/x.json", "--json")
    with pytest.raises(AgentschedError, match=r"^cannot create output folder /proc/x: "):
        prepare_output_dir("/proc/x")
    with pytest.raises(AgentschedError, match=r"^cannot write /proc/x\.json: "):
        write_json("/proc/x.json", {})


def test_prepare_output_dir_creates_it_and_leaves_it_empty(tmp_path):
    out = prepare_output_dir(tmp_path / "a" / "b")
    assert out.is_dir() and list(out.iterdir()) == []


def test_write_json(tmp_path):
    write_json(tmp_path / "x.json", {"a": 1}, indent=2)
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def test_write_json_streams_a_large_document(tmp_path, capsys):
    """The text is written as it is encoded, never held whole (a 10,000-task run's JSON is 80 MB,
    and building it at once took 600 MB): the same bytes as json.dumps, a fraction of its memory."""
    import tracemalloc

    from agentsched.cli.common import print_json

    doc = {"rounds": [{"task": f"T{i}", "mean_ms": i * 0.5, "mode": "gpu_now"} for i in range(50_000)]}
    text = json.dumps(doc, indent=2) + "\n"
    tracemalloc.start()
    try:
        write_json(tmp_path / "x.json", doc, indent=2)
        peak_write = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "x.json").read_text() == text
    assert peak_write < len(text) / 5, (peak_write, len(text))
    print_json(doc)  # the same stream to stdout (whose capture here holds it all, so no memory check)
    assert capsys.readouterr().out == text


def test_one_loader_of_the_papers_tables():
    import agentsched.data as data
    from agentsched.experiments import paper
    from agentsched.report import markdown

    assert paper.paper_tables is data.paper_tables and markdown.paper_tables is data.paper_tables
    assert not hasattr(markdown, "PAPER_FIRST_MATCH")
    assert paper.paper_first_match_rounds() == {"S11": 2, "S12": 1, "S13": 3}  # Table 5


@pytest.mark.parametrize("taken", ["report.md", "results.json", "gantt_S1_all_gpu_vs_oracle.png", "journal.sqlite"])
def test_bench_refuses_a_folder_where_an_output_file_goes_before_its_runs(cli, tmp_path, taken):
    """(A folder named report.md failed the bench after its runs, not naming the file.)"""
    (tmp_path / "b" / taken).mkdir(parents=True)
    code, out, err = cli(
        "bench",
        "--scenarios",
        "S1",
        "--policies",
        "heft",
        "--seeds",
        "1",
        "--rounds",
        "2",
        "--gantt",
        "S1",
        "--out",
        str(tmp_path / "b"),
    )
    assert code != 0 and err.strip() == (
        f"error: --out: {tmp_path / 'b' / taken} is a folder, where the output file {taken} goes; remove or rename it"
    )
    assert "done" not in out + err
