"""`agentsched bench` on a workflow too large for one of its policies (ucb1 over its arm cap of 4,096
mappings, as generated three-way workflows of 8 tasks and more are): a note, not a stop."""

from __future__ import annotations

import json

import pytest

from tests.support.big_workflow import CAP_LINE, TINY, write_big


@pytest.fixture
def big(tmp_path) -> str:
    return write_big(tmp_path)


def test_bench_skips_a_policy_on_a_workflow_over_its_cap_and_runs_the_rest(cli, tmp_path, big):
    out = tmp_path / "b"
    code, text, err = cli(
        "bench",
        "--scenarios",
        f"{TINY},{big}",
        "--policies",
        "all-gpu,ucb1",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--noise",
        "0",
        "--world",
        "a5500",
        "--no-ablation",
        "--out",
        str(out),
    )
    assert code == 0, err
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert notes == [f"note: ucb1 skipped on big: {CAP_LINE}"]  # one line, however long
    doc = json.loads((out / "results.json").read_text())
    assert [(r["scenario"], r["policy"]) for r in doc["records"]] == [
        ("tiny", "all-gpu"),
        ("tiny", "ucb1"),
        ("big", "all-gpu"),
    ]
    assert doc["skipped"] == [{"scenario": "big", "policy": "ucb1", "reason": CAP_LINE}]
    assert f"- Note: ucb1 skipped on big: {CAP_LINE}" in (out / "report.md").read_text()


def test_bench_whose_policies_can_run_no_workflow_is_one_line_before_any_work(cli, tmp_path, big):
    out = tmp_path / "b"
    code, text, err = cli("bench", "--scenarios", big, "--policies", "ucb1", "--out", str(out))
    assert (code, text) == (2, "")
    assert err.splitlines() == [f"error: no chosen policy (ucb1) can run any benched workflow: {CAP_LINE}"]
    assert not out.exists()  # refused before the output folder, the testbed and the oracle
