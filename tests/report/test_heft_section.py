"""report/heft_section.py: on workflows the paper does not have, the HEFT variants section says in words
that there is no paper column to compare with and counts full matches over the workflows benched (it
used to print 'paper HEFT-CF' dashes and 0/0 counts over the paper's S1-S10 that did not run)."""

from __future__ import annotations

from agentsched.report.markdown import render_report


def test_heft_variants_on_workflows_the_paper_lacks_count_them_not_0_of_0(generated_bench, report_section):
    heft = report_section(render_report(generated_bench), "## HEFT variants")
    assert "0/0" not in heft and "paper HEFT-CF" not in heft
    assert "None of these workflows is one of the paper's S1-S10" in heft
    study = generated_bench.heft_study
    scen = list(study.scenarios)
    header = next(line for line in heft.splitlines() if line.startswith("| variant |"))
    assert header.endswith("| full, strict | full, lenient |")
    for v in study.variants:
        row = next(line for line in heft.splitlines() if line.startswith(f"| {v.label} |"))
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert [c.split()[0] for c in cells[1:-2]] == [f"{v.exact[s]}/{v.tasks[s]}" for s in scen]
        assert cells[-2:] == [f"{v.full(scen, exact=True)}/{len(scen)}", f"{v.full(scen)}/{len(scen)}"]


def test_a_generated_workflow_benched_beside_a_paper_scenario_shows_its_own_task_count(tmp_path, report_section):
    from agentsched.experiments.bench import BenchConfig, run_bench
    from agentsched.model.generate import generate_suite

    files = generate_suite(tmp_path, tasks=5, seed=1)[:1]
    res = run_bench(
        BenchConfig(scenarios=("S5", str(files[0])), policies=("all-gpu", "heft"), rounds=1, repeats=1, seeds=(0,))
    )
    heft = report_section(render_report(res), "## HEFT variants")
    study = res.heft_study
    gen = next(s for s in study.scenarios if s != "S5")
    for v in study.variants:
        row = next(line for line in heft.splitlines() if line.startswith(f"| {v.label} |"))
        cells = dict(zip(study.scenarios, [c.strip() for c in row.strip().strip("|").split("|")][1:], strict=False))
        assert cells["S5"] == str(v.exact["S5"]) and cells[gen] == f"{v.exact[gen]}/{v.tasks[gen]}"
