"""Write a bench's outputs: results.json, report.md and the PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

from agentsched.errors import AgentschedError
from agentsched.experiments.bench_records import BenchResult
from agentsched.experiments.results import results_dict
from agentsched.report import markdown, plots


def output_names(gantt_scenario: str) -> tuple[str, ...]:
    """The files a bench writes in its folder (checked before its runs)."""
    return ("results.json", "report.md", plots.E2E_FIGURE, plots.CONVERGENCE_FIGURE, plots.gantt_name(gantt_scenario))


def write_outputs(result: BenchResult, out_dir: str | Path) -> list[Path]:
    """Write results.json, report.md and the PNG plots into ``out_dir``; return the paths."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AgentschedError(f"cannot create output folder {out}: {e.strerror}") from None
    try:
        paths = []
        p = out / "results.json"
        p.write_text(json.dumps(results_dict(result), indent=1) + "\n")
        paths.append(p)
        images = plots.write_plots(result, out)
        paths.extend(images)
        p = out / "report.md"
        p.write_text(markdown.render_report(result, [i.name for i in images]))
        paths.append(p)
    except OSError as e:
        where = e.filename or out  # (the file: a folder in its place is named)
        raise AgentschedError(f"cannot write the outputs in {out}: {where}: {e.strerror or type(e).__name__}") from None
    return paths
