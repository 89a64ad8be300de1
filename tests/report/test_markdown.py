"""report/markdown.py: the oracle table names the workflows' own tasks, whatever their number and names
(it used to say 'A B C D', the paper's scenarios, above 5- and 7-task workflows)."""

from __future__ import annotations

from agentsched.experiments.bench import BenchConfig, run_bench
from agentsched.model.generate import generate_suite
from agentsched.report.markdown import render_report


def _rows(table: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def test_oracle_cells_name_their_tasks_when_workflows_differ(generated_bench, report_section):
    rows = _rows(report_section(render_report(generated_bench), "## Oracles"))
    assert rows[0][:2] == ["scenario", "our oracle (task=placement)"]
    by_name = {r[0]: r[1] for r in rows[1:]}
    assert set(by_name) == set(generated_bench.workflows)
    for name, wf in generated_bench.workflows.items():
        best = generated_bench.views[name].best
        want = [f"{t}={'gpu' if best[t].value == 'gpu_now' else best[t].value}" for t in wf.task_ids]
        assert by_name[name].split() == want  # 5 and 7 tasks, each named


def test_oracle_header_names_the_tasks_when_every_workflow_has_the_same(tmp_path, report_section):
    files = generate_suite(tmp_path, tasks=6, count=2, seed=3)
    result = run_bench(
        BenchConfig(scenarios=tuple(map(str, files)), policies=("heft",), rounds=1, repeats=1, seeds=(0,))
    )
    rows = _rows(report_section(render_report(result), "## Oracles"))
    assert rows[0][:2] == ["scenario", "our oracle (A B C D E F)"]
    assert all(len(r[1].split()) == 6 for r in rows[1:])
