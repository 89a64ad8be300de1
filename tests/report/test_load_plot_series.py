"""The load study's plot and report as a reader needs them (issue 48, item 11): each policy its own colour,
no legend entry for a policy without a line, a mark where percentiles omit OOM'd invocations; the progress
of a study as a bar with an ETA on a terminal; the report printed rendered, not as Markdown source."""

from __future__ import annotations

import io

from rich.console import Console

from agentsched.cli.progress import load_progress
from agentsched.experiments.traffic import CAPACITY_POLICIES, study_steps
from agentsched.report.traffic_report import load_markdown, plot_latency_vs_load, series


def _row(policy: str, load: float, p99: float | None, oom: int = 0) -> dict:
    return {
        "policy": policy,
        "load": load,
        "rate_per_s": load * 10,
        "p50_ms": None if p99 is None else p99 / 2,
        "p95_ms": p99,
        "p99_ms": p99,
        "throughput_per_s": 1.0,
        "oom": oom,
        "errors": 0,
        "gpu_util": 0.5,
        "decision_ms_p50": 0.01,
        "slowdown_by_workflow": {"S1": 1.0},
    }


def _doc(rows: list[dict]) -> dict:
    return {
        "rows": rows,
        "machine": {"vram_budget_mb": None, "cpu_slots": 4, "world": "a5500", "noise_sigma": 0.0},
        "arrival": "poisson",
        "duration_s": 60.0,
        "seeds": 1,
        "capacity_per_s": 10.0,
        "saturation_throughput_per_s": {},
    }


def test_every_policy_has_its_own_colour_even_past_ten():
    doc = _doc([_row(f"p{i}", ld, 100.0 + i) for i in range(12) for ld in (0.5, 0.9)])
    lines, lost = series(doc)
    assert len({s.color for s in lines}) == 12 and not lost


def test_a_policy_that_lost_everything_has_no_line_and_one_that_lost_some_is_marked(tmp_path):
    doc = _doc(
        [
            _row("fifo", 0.5, 100.0),
            _row("greedy", 0.5, None, oom=40),
            _row("greedy", 0.9, None, oom=80),
            _row("dmda", 0.5, 90.0),
            _row("dmda", 0.9, 120.0, oom=3),
        ]
    )
    lines, lost = series(doc)
    assert [s.policy for s in lines] == ["fifo", "dmda"] and lost == ["greedy"]
    assert [s.omits_oom for s in lines] == [False, True]
    assert plot_latency_vs_load(doc, tmp_path / "p.png").stat().st_size > 0
    md = load_markdown(doc, None)
    assert "| 120 * |" in md and "omit the invocations lost to OOM" in md


def test_a_study_shows_a_bar_with_an_eta_on_a_terminal_and_lines_elsewhere():
    steps = study_steps(["fifo", "dmda+adm"], 3)
    assert steps == len(set(CAPACITY_POLICIES) | {"fifo", "dmda+adm"}) + 6
    term = Console(file=io.StringIO(), force_terminal=True, width=100)
    with load_progress(term, steps=steps) as progress:
        progress("capacity search: fifo sustains 8/s")
    assert "ETA" in term.file.getvalue() and "capacity search: fifo sustains 8/s" in term.file.getvalue()
    piped = Console(file=io.StringIO(), force_terminal=False, width=100)
    with load_progress(piped, steps=steps) as progress:
        progress("fifo at load 0.50")
    assert piped.file.getvalue() == "fifo at load 0.50\n"


def test_the_report_is_printed_rendered(monkeypatch):
    from agentsched.cli import common, output

    out = Console(file=io.StringIO(), force_terminal=False, width=150)
    monkeypatch.setattr(common, "console", out)
    output.emit(
        {}, load_markdown(_doc([_row("fifo", 0.5, 100.0)]), None), json_out=False, json_file=None, markdown=True
    )
    text = out.file.getvalue()
    assert "Scheduling under load" in text and "# Scheduling" not in text and "|---" not in text
