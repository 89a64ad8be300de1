"""The deterministic reasoner: its written rules on hand-made cards, and end to end."""

from __future__ import annotations

from dataclasses import replace

from agentsched.agent.policy import AgentPolicy
from agentsched.agent.rules import RulesReasoner
from agentsched.agent.view import AgentView, Measured
from agentsched.experiments.check import run_check
from agentsched.loop.runner import run_loop
from agentsched.model.cards import CardSet, ToolCard
from agentsched.model.execution import Status
from agentsched.model.workflow import Mode, Workflow
from agentsched.monitor.records import BestMapping, Hint, HistoryEntry
from agentsched.oracle import brute_force
from agentsched.scenarios import list_scenarios, load_scenario
from tests.support.host_down import HOST_ERROR, HostDown
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow
from tests.support.views import round0_view

CPU, NOW, QUEUE = Mode.CPU, Mode.GPU_NOW, Mode.GPU_QUEUE


def hand_workflow(cards: dict[str, tuple], *, edges=(), space="binary", budget=None) -> Workflow:
    cs = CardSet(
        name="hand",
        cards={
            n: ToolCard(name=n, cpu_ms=c, gpu_ms=g, load_ms=ld, vram_mb=v, tags=t)
            for n, (c, g, ld, v, t) in cards.items()
        },
    )
    tasks = dict(zip("ABCD", cards, strict=False))
    return Workflow.model_validate(
        {
            "name": "hand",
            "decision_space": space,
            "vram_budget_mb": budget,
            "tasks": tasks,
            "edges": [list(e) for e in edges],
        }
    ).with_cards(cs)


def later_view(wf, *, best=None, measured=(), hints=(), history=None, rnd=3, rounds=20, start="warm"):
    v = round0_view(wf, start, rounds)
    if history is None:
        history = tuple(
            HistoryEntry(i, best.mapping if best else {}, Status.OK, best.e2e_ms if best else None, 0.0)
            for i in range(rnd)
        )
    from agentsched.monitor.records import Evidence

    ev = Evidence(rnd - 1, False, True, ("history",), history[-1], best, (), (), (), tuple(hints), {}, 0, 0, (), ())
    return AgentView(wf, start, v.tools, rnd, rounds, tuple(history), best, ev, tuple(measured), {}, True, 0.02)


def test_ratio_guideline_round0():
    wf = hand_workflow(
        {
            "fast_gpu": (1000, 100, 0, 100, ()),  # ratio 10 -> gpu
            "cpu_wins": (30, 60, 0, 100, ()),  # ratio 0.5 -> cpu
            "cheap": (90, 30, 0, 100, ()),  # ratio 3, cpu 90 <= the 100 ms it runs beside -> cpu
            "costly": (400, 100, 0, 100, ()),  # ratio 4, cpu 400 > 100 -> gpu
        }
    )
    d = RulesReasoner().propose(round0_view(wf))
    assert d.mapping == {"A": NOW, "B": CPU, "C": CPU, "D": NOW}
    assert "ratio" in d.reason


def test_ratio_guideline_alone_in_its_stage_stays_on_gpu_and_no_gpu_tools_go_to_cpu():
    wf = hand_workflow(
        {
            "amb": (90, 30, 0, 100, ()),  # alone (A of a diamond): nothing to hide behind -> gpu
            "x": (1000, 100, 0, 100, ()),
            "y": (1000, 100, 0, 100, ()),
            "host": (50, None, None, None, ("io-bound",)),  # no GPU implementation -> cpu
        },
        edges=[("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
    )
    assert RulesReasoner().propose(round0_view(wf)).mapping == {"A": NOW, "B": NOW, "C": NOW, "D": CPU}


def test_structural_rules_round0_three_way():
    # losses per MB: delta 2.0, alpha 0.75, beta 0.67, gamma 0.5 -> delta, alpha, beta on gpu_now (750 MB);
    # gamma does not fit (950 > 800): its queue finish 200 ms < cpu 600 ms -> gpu_queue
    wf = workflow(budget_mb=800)
    assert RulesReasoner().propose(round0_view(wf)).mapping == mapping("now now queue now")


def test_structural_rules_queue_timeline_sends_late_tasks_to_cpu():
    wf = hand_workflow(
        {
            "big": (5000, 100, 700, 700, ()),  # loss 700 ms / 700 MB: first on gpu_now
            "q1": (5000, 100, 500, 500, ()),  # loss 1.0 per MB, does not fit beside big: queue, ends at 600 ms
            "q2": (900, 100, 400, 500, ()),  # behind q1 in the queue: 600 + 500 = 1100 > 900 -> cpu
            "small": (10, 5, 1, 10, ()),  # fits beside big
        },
        space="three_way",
        budget=800,
    )
    m = RulesReasoner().propose(round0_view(wf)).mapping
    assert m == {"A": NOW, "B": QUEUE, "C": CPU, "D": NOW}


def test_cold_start_follows_tags():
    wf = workflow(budget_mb=800)
    d = RulesReasoner().propose(round0_view(wf, "cold"))
    assert d.mapping == mapping("now now now cpu")  # compute-bound on the GPU, memory-bound on the CPU


def test_adopts_a_what_if_only_beyond_the_stability_threshold():
    wf = workflow(budget_mb=800)
    best = BestMapping(mapping("now now cpu cpu"), 1000.0, 5, 1)
    near = Measured(mapping("now now cpu now"), 985.0, 1, False)  # 1.5% better: within the threshold
    far = Measured(mapping("now cpu cpu cpu"), 970.0, 1, False)  # 3% better
    r = RulesReasoner()
    assert r.propose(later_view(wf, best=best, measured=(best_m(best), near))).mapping == best.mapping
    d = r.propose(later_view(wf, best=best, measured=(best_m(best), near, far)))
    assert d.mapping == far.mapping and "adopt" in d.reason
    # a what-if already run as a round is history, not a candidate
    tried = Measured(far.mapping, 970.0, 1, True)
    assert r.propose(later_view(wf, best=best, measured=(best_m(best), tried))).mapping == best.mapping


def best_m(best: BestMapping) -> Measured:
    return Measured(best.mapping, best.e2e_ms, best.samples, True)


def test_follows_a_hint_once_making_room_under_the_budget():
    wf = workflow(budget_mb=800)
    best = BestMapping(mapping("now now cpu cpu"), 1000.0, 5, 1)
    hint = Hint("hint: C on gpu_now has never run", "C", NOW, 200.0, 100.0)
    r = RulesReasoner()
    d = r.propose(later_view(wf, best=best, measured=(best_m(best),), hints=(hint,)))
    # C needs 200 MB, 100 MB are free: the smallest gpu_now task that alone frees 100 MB (B, 300) queues
    assert d.mapping == mapping("now queue now cpu") and "hint" in d.reason
    again = r.propose(later_view(wf, best=best, measured=(best_m(best),), hints=(hint,)))
    assert again.mapping == best.mapping  # a hint is followed once


def test_recovers_from_an_infeasible_round_without_evidence():
    wf = workflow(budget_mb=800)
    oom = HistoryEntry(0, mapping("now now now now"), Status.OOM, None, 900.0, "C broke the budget", "C")
    d = RulesReasoner().propose(later_view(wf, history=(oom,), rnd=1))
    assert d.mapping == mapping("now now queue now")  # the culprit fits alone: gpu_queue
    wfb = workflow("binary", 800)
    oomb = HistoryEntry(0, mapping("now now now now"), Status.OOM, None, 900.0, "C broke the budget", "C")
    assert RulesReasoner().propose(later_view(wfb, history=(oomb,), rnd=1)).mapping == mapping("now now cpu now")


def test_takes_the_best_feasible_what_if_while_nothing_is_feasible():
    wf = workflow(budget_mb=800)
    oom = HistoryEntry(0, mapping("now now now now"), Status.OOM, None, 900.0, "", "C")
    ms = (
        Measured(mapping("now now now now"), None, 0, True),
        Measured(mapping("now now cpu now"), 600.0, 1, False),
        Measured(mapping("now now queue now"), 300.0, 1, False),
    )
    assert RulesReasoner().propose(later_view(wf, history=(oom,), measured=ms, rnd=1)).mapping == mapping(
        "now now queue now"
    )


def test_last_round_keeps_the_best():
    wf = workflow(budget_mb=800)
    best = BestMapping(mapping("now now cpu cpu"), 1000.0, 5, 1)
    far = Measured(mapping("now cpu cpu cpu"), 500.0, 1, False)
    d = RulesReasoner().propose(later_view(wf, best=best, measured=(best_m(best), far), rnd=19, rounds=20))
    assert d.mapping == best.mapping and "last round" in d.reason


def test_reaches_the_known_optimum_on_the_scripted_testbed():
    wf = workflow(budget_mb=800)
    tb = ScriptedTestbed(slowdown=1.5)
    best = brute_force(wf, tb, repeats=1).best  # scoring only
    for start in ("warm", "cold"):
        for initial in ("rules", "all-gpu"):
            run = run_loop(wf, AgentPolicy("rules", start=start, initial=initial), tb, rounds=8, repeats=1)
            assert run.rounds[-1].e2e_ms == best.e2e_ms, (start, initial)  # ties: any optimal mapping


def test_agent_rules_reaches_an_oracle_equivalent_mapping_in_all_scenarios():
    """The acceptance check: S1..S13 on the simulator, warm and cold, two seeds (oracle for scoring only)."""
    res = run_check([load_scenario(s) for s in list_scenarios()], starts=("warm", "cold"), seeds=(0, 1), baselines=())
    bad = [(r.scenario, r.policy) for r in res.rows if r.reached != len(r.runs)]
    assert not bad, res.to_markdown()


def test_a_round_with_nothing_to_judge_moves_no_task_and_says_why():
    wf = workflow(budget_mb=800)
    m = mapping("now now now now")
    host = HistoryEntry(
        0,
        m,
        Status.ERROR,
        None,
        0.0,
        f"nothing to judge: every run failed in host code ({HOST_ERROR})",
        None,
        judged=False,
    )
    d = RulesReasoner().propose(later_view(wf, history=(host,), rnd=1))
    assert d.mapping == m
    assert (
        d.reason == "round 0 had nothing to judge (every run failed in host code, not the mapping's doing): "
        "run its mapping again"
    )
    # the same round judged a failure: the rules would move a task (what they must not do for host code)
    assert RulesReasoner().propose(later_view(wf, history=(replace(host, judged=True),), rnd=1)).mapping != m
    # with a best mapping known, the mapping the round had no verdict on runs again (it gets one)
    best = BestMapping(mapping("now now cpu cpu"), 600.0, 2, 0)
    tried = replace(host, round=1, mapping=mapping("now now queue cpu"))
    ok = HistoryEntry(0, best.mapping, Status.OK, 600.0, 700.0)
    d = RulesReasoner().propose(later_view(wf, best=best, measured=(best_m(best),), history=(ok, tried), rnd=2))
    assert d.mapping == tried.mapping and "nothing to judge" in d.reason
    last = later_view(wf, best=best, measured=(best_m(best),), history=(ok, tried), rnd=2, rounds=3)
    assert RulesReasoner().propose(last).mapping == best.mapping  # the last round still keeps the best


def test_a_round_that_failed_in_host_code_runs_again_and_is_judged_end_to_end():
    wf = workflow(budget_mb=800)
    tb = HostDown(ScriptedTestbed(), failing=2)  # round 0's two runs: the LLM endpoint is down
    run = run_loop(wf, AgentPolicy("rules"), tb, rounds=3, repeats=2)
    r0, r1 = run.records[0], run.records[1]
    assert not r0.result.judged and r0.result.status is Status.ERROR
    assert r1.result.mapping == r0.result.mapping and r1.result.ok and r1.result.judged
    assert r1.proposal_info["reason"].startswith("round 0 had nothing to judge")
