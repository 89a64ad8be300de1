"""The HEFT study (which machine model / factor matches the paper's HEFT column)."""

from agentsched.experiments.harness import scoring_view
from agentsched.experiments.heft_study import heft_study, planned_mapping
from agentsched.loop.metrics import best_oracle_match
from agentsched.scenarios import load_scenario
from agentsched.testbeds.sim import SimTestbed


def test_study_scores_each_plan_against_the_oracle_and_reads_the_paper_row():
    sim = SimTestbed(noise_sigma=0.0, seed=None)
    wfs = {s: load_scenario(s) for s in ("S5", "S10", "S13")}
    views = {s: scoring_view(wf, sim)[1] for s, wf in wfs.items()}
    study = heft_study(wfs, views, factors=(0.5, 5.0))
    assert [v.label for v in study.variants] == [
        "heft (parallel)",
        "heft-cf (parallel, factor 0.5)",
        "heft-cf (parallel, factor 5)",
        "heft (classical)",
        "heft-cf (classical, factor 0.5)",
        "heft-cf (classical, factor 5)",
    ]
    assert study.paper == {"S5": 3, "S10": 2} and study.paper_full == 2 and study.table4 == ["S5", "S10"]
    for v in study.variants:
        for s, wf in wfs.items():
            opts = {"machine": v.machine, **({} if v.factor is None else {"contention_factor": v.factor})}
            m = planned_mapping(wf, v.policy, **opts)
            assert v.matches[s] == best_oracle_match([m], views[s].equivalent_mappings)
            assert v.exact[s] <= v.matches[s] <= 4
    best = max(v.paper_agreement(study.paper, study.table4) for v in study.variants)
    assert study.closest() and all(v.paper_agreement(study.paper, study.table4) == best for v in study.closest())


def test_a_workflow_file_that_only_calls_itself_s5_gets_no_paper_figure(tmp_path):
    """The paper's HEFT-CF row is about its S5; a user's workflow named S5 is another workflow."""
    from agentsched.scenarios import resolve_workflow

    path = tmp_path / "s5.yaml"
    path.write_text(
        "name: S5\ncards: a5500\ndecision_space: binary\n"
        "tasks:\n  A: {tool: ocr, repeat: 1}\n  B: {tool: sentiment, repeat: 1}\nedges: []\n"
    )
    sim = SimTestbed(noise_sigma=0.0, seed=None)
    wfs = {"S5": resolve_workflow(str(path)), "S10": load_scenario("S10")}
    views = {s: scoring_view(wf, sim)[1] for s, wf in wfs.items()}
    study = heft_study(wfs, views, factors=(0.5,))
    assert study.paper == {"S10": 2} and study.table4 == ["S10"]
