"""Progress of a long command: a bar with an ETA on a terminal; one plain line per finished scenario
when stdout is a file, a pipe or a CI log (a bar there prints nothing until the end, or garbage)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console


def _fmt_s(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class ScenarioLines:
    """Counts finished runs; prints ``S3 done: 3/13 scenarios, 39/169 runs, 12 s, about 40 s left``
    when the last run of a scenario finishes. Runs arrive scenario by scenario (the bench's order)."""

    def __init__(
        self,
        console: Console,
        *,
        scenarios: int,
        runs_per_scenario: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.console = console
        self.scenarios = scenarios
        self.per_scenario = runs_per_scenario
        self.total = scenarios * runs_per_scenario
        self.done = 0
        self.skipped = 0  # runs a policy's limit left out: counted (the total holds them), and said
        self.clock = clock
        self.t0 = clock()

    def __call__(self, label: str) -> None:
        self.done += 1
        self.skipped += label.endswith("(skipped)")
        if self.done % self.per_scenario and self.done != self.total:
            return
        elapsed = self.clock() - self.t0
        finished = -(-self.done // self.per_scenario)
        left = elapsed / self.done * (self.total - self.done)
        eta = f", about {_fmt_s(left)} left" if self.done < self.total else ""
        self.console.print(
            f"{label.split()[0]} done: {finished}/{self.scenarios} scenarios, "
            f"{self.done}/{self.total} runs"
            f"{f' ({self.skipped} skipped)' if self.skipped else ''}, {_fmt_s(elapsed)}{eta}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        self.console.file.flush()


@contextlib.contextmanager
def _eta_bar(console: Console, name: str, total: int) -> Iterator[tuple[Any, Any]]:
    """A transient bar with elapsed time and ETA (a terminal only): yields the bar and its task."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        yield bar, bar.add_task(name, total=total)


@contextlib.contextmanager
def bench_progress(console: Console, *, scenarios: int, runs_per_scenario: int) -> Iterator[Callable[[str], None]]:
    """A ``progress(label)`` callback for ``run_bench``: a transient bar with elapsed time and ETA on
    a terminal, ``ScenarioLines`` otherwise."""
    if not console.is_terminal:
        yield ScenarioLines(console, scenarios=scenarios, runs_per_scenario=runs_per_scenario)
        return
    with _eta_bar(console, "bench", scenarios * runs_per_scenario) as (bar, task):
        yield lambda label: bar.update(task, advance=1, description=label)


@contextlib.contextmanager
def load_progress(console: Console, *, steps: int) -> Iterator[Callable[[str], None]]:
    """A ``progress(label)`` callback for ``run_load`` (one call per search found and per row done, ``steps``
    in all): a transient bar with elapsed time and ETA on a terminal; each label on its own line otherwise."""
    if not console.is_terminal:
        yield lambda label: console.print(label, highlight=False, markup=False, soft_wrap=True)
        return
    with _eta_bar(console, "load study", max(1, steps)) as (bar, task):

        def advance(label: str) -> None:
            bar.console.print(label, highlight=False, markup=False, soft_wrap=True)  # above the bar, kept
            bar.update(task, advance=1, description=label)

        yield advance
