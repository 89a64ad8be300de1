"""What the report tests share: a bench on generated workflows (not the paper's scenarios: two
sizes, other task names) with every default bench policy, eleven of them, more than matplotlib's
ten cycle colours; a spy on saved figures; and a way to cut a section out of report.md."""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.figure
import pytest

from agentsched.cli.bench_cmd import _policies
from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.experiments.bench_records import BenchResult
from agentsched.model.generate import generate_suite

# `agentsched bench`'s default policies (every baseline, the oracle and the agents without an LLM)
DEFAULT_BENCH_POLICIES = tuple(_policies(None, []))


@pytest.fixture(scope="session")
def generated_bench(tmp_path_factory) -> BenchResult:
    """Two generated workflows, of 5 and 7 tasks, under every default policy; a second or two."""
    folder = tmp_path_factory.mktemp("generated")
    files = generate_suite(folder, tasks=5, seed=1) + generate_suite(folder, tasks=7, topology="random", seed=2)
    return run_bench(
        BenchConfig(scenarios=tuple(map(str, files)), policies=DEFAULT_BENCH_POLICIES, rounds=2, repeats=1, seeds=(0,))
    )


@pytest.fixture
def saved_figures(monkeypatch) -> list[matplotlib.figure.Figure]:
    """Every figure saved during the test (the real savefig still runs)."""
    figs = []
    real = matplotlib.figure.Figure.savefig

    def spy(self, *args, **kwargs):
        figs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return figs


def section(report: str, title: str) -> str:
    """The report's section that starts with ``title``, up to the next '## ' heading."""
    start = report.index(title)
    nxt = report.find("\n## ", start + 1)
    return report[start : nxt if nxt > 0 else len(report)]


@pytest.fixture
def report_section() -> Callable[[str, str], str]:
    return section
