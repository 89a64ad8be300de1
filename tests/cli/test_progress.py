"""Issue 13 item 5: bench progress is a bar with an ETA on a terminal and one line per finished
scenario otherwise."""

import io

from rich.console import Console

from agentsched.cli.progress import ScenarioLines, bench_progress


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_one_line_per_finished_scenario_with_eta():
    buf = io.StringIO()
    clock = FakeClock()
    lines = ScenarioLines(Console(file=buf, width=200), scenarios=3, runs_per_scenario=2, clock=clock)
    for label in (
        "S1 heft seed 0",
        "S1 heft seed 1",
        "S2 heft seed 0",
        "S2 heft seed 1",
        "S3 heft seed 0",
        "S3 heft seed 1",
    ):
        clock.t += 5.0
        lines(label)
    assert buf.getvalue().splitlines() == [
        "S1 done: 1/3 scenarios, 2/6 runs, 10 s, about 20 s left",
        "S2 done: 2/3 scenarios, 4/6 runs, 20 s, about 10 s left",
        "S3 done: 3/3 scenarios, 6/6 runs, 30 s",
    ]


def test_skipped_runs_are_said_in_the_count():
    """(12/12 runs, then "10 runs" in the summary: two were a policy's skipped pairs.)"""
    buf = io.StringIO()
    lines = ScenarioLines(Console(file=buf, width=200), scenarios=2, runs_per_scenario=2, clock=FakeClock())
    for label in ("S1 ucb1 seed 0 (skipped)", "S1 heft seed 0", "S2 ucb1 seed 0 (skipped)", "S2 heft seed 0"):
        lines(label)
    assert [line.split(", ")[1] for line in buf.getvalue().splitlines()] == [
        "2/4 runs (1 skipped)",
        "4/4 runs (2 skipped)",
    ]


def test_plain_lines_without_a_terminal_and_a_bar_with_eta_on_one():
    plain = Console(file=io.StringIO(), force_terminal=False)
    with bench_progress(plain, scenarios=1, runs_per_scenario=1) as progress:
        assert isinstance(progress, ScenarioLines)
        progress("S1 heft seed 0")
    assert plain.file.getvalue().startswith("S1 done: 1/1 scenarios, 1/1 runs")
    term = Console(file=io.StringIO(), force_terminal=True, width=120)
    with bench_progress(term, scenarios=2, runs_per_scenario=1) as progress:
        assert not isinstance(progress, ScenarioLines)
        progress("S1 heft seed 0")
        term.file.flush()
    assert "ETA" in term.file.getvalue()


def test_bench_to_a_file_prints_scenario_lines(cli, tmp_path):
    code, out, err = cli(
        "bench",
        "--scenarios",
        "S1,S2",
        "--policies",
        "heft",
        "--seeds",
        "2",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--no-ablation",
        "--out",
        str(tmp_path / "b"),
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith("S1 done: 1/2 scenarios, 2/4 runs")
    assert out.splitlines()[1].startswith("S2 done: 2/2 scenarios, 4/4 runs")
