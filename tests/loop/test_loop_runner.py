"""The runner's accounting: executions (probes included) and regret, exact on tiny cases."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop import oracle_view, reference_oracle, run_loop, run_metrics, summarize_runs
from agentsched.loop.metrics import regret_fraction, regret_ms
from agentsched.loop.registry import make_policy
from agentsched.model import Mode, Status
from agentsched.model.execution import Execution
from agentsched.model.mapping import mapping_key
from agentsched.policies.base import Policy, Proposal
from agentsched.scenarios import load_scenario
from agentsched.testbeds import SimTestbed
from tests.support.host_down import HOST_ERROR, HostDown

G, C = Mode.GPU_NOW, Mode.CPU


class Scripted(Policy):
    """Proposes a fixed list of mappings; probes the given mappings while proposing/observing."""

    name = "scripted"

    def __init__(self, mappings, probe_on_propose=(), probe_on_observe=()):
        self.mappings = mappings
        self.on_propose = probe_on_propose
        self.on_observe = probe_on_observe

    def propose(self, round_index):
        for m in self.on_propose:
            self.ctx.probe(m)
        return Proposal(self.mappings[round_index], {"i": round_index})

    def observe(self, result):
        for m in self.on_observe:
            self.ctx.probe(m)
        return {"summary": [f"saw {result.e2e_ms}"]}


def one_task(make_workflow):
    # GPU 10 ms, CPU 30 ms: the oracle is 10 ms on the GPU
    return make_workflow({"a": {"cpu_ms": 30, "gpu_ms": 10}}, {"A": "a"})


def test_executions_and_regret_with_probes(make_workflow, no_contention):
    wf = one_task(make_workflow)
    tb = SimTestbed(world=no_contention, noise_sigma=0.0)
    pol = Scripted([{"A": C}, {"A": G}], probe_on_observe=[{"A": G}])
    run = run_loop(wf, pol, tb, rounds=2, repeats=3)
    # R0: 3 runs (3) + 1 probe (4); R1: 3 runs (7) + 1 probe (8)
    assert [r.result.executions_total for r in run.records] == [3, 7]
    assert [r.executions_after for r in run.records] == [4, 8]
    assert [len(r.probes) for r in run.records] == [1, 1]
    assert run.executions_total == 8 == len(run.all_executions())
    assert run.records[0].evidence == {"summary": ["saw 30.0"]}
    assert run.records[1].proposal_info == {"i": 1}
    view = oracle_view(wf, reference_oracle(wf, tb))
    m = run_metrics(run, view)
    # regret: R0 3 x (30 - 10) = 60, probes and R1 on the GPU add 0 -> 60 / (10 x 8)
    assert (m.regret_ms, m.regret) == (60.0, 0.75)
    assert (m.executions, m.probes) == (8, 2)
    assert (m.best_round, m.best_e2e_ms, m.best_ratio) == (1, 10.0, 1.0)
    assert (m.first_equivalent_round, m.best_match, m.final_ratio) == (1, 1, 1.0)


def test_probes_while_proposing_belong_to_that_round(make_workflow, no_contention):
    wf = one_task(make_workflow)
    pol = Scripted([{"A": G}, {"A": G}], probe_on_propose=[{"A": C}, {"A": C}])
    run = run_loop(wf, pol, SimTestbed(world=no_contention, noise_sigma=0.0), rounds=2, repeats=1)
    # R0: 2 probes, then 1 run -> 3; R1: 2 more probes, 1 run -> 6
    assert [r.result.executions_total for r in run.records] == [3, 6]
    assert [len(r.probes) for r in run.records] == [2, 2]
    assert run.executions_total == 6
    assert regret_ms(run.all_executions(), 10.0) == 4 * 20.0


def oom_workflow(make_workflow):
    """A (GPU 100 ms, 600 MB) || C (CPU 20 ms) -> B (GPU 10 ms, 600 MB), budget 1000 MB.
    A and B both on the GPU: B becomes ready at t=20 beside A and runs out of memory then."""
    return make_workflow(
        {
            "a": {"cpu_ms": 400, "gpu_ms": 100, "vram_mb": 600},
            "b": {"cpu_ms": 30, "gpu_ms": 10, "vram_mb": 600},
            "c": {"cpu_ms": 20},
        },
        {"A": "a", "B": "b", "C": "c"},
        edges=[("C", "B")],
        budget=1000,
    )


def test_infeasible_executions_are_charged_the_time_they_ran(make_workflow, no_contention):
    wf = oom_workflow(make_workflow)
    tb = SimTestbed(world=no_contention, noise_sigma=0.0)
    view = oracle_view(wf, reference_oracle(wf, tb))
    assert view.e2e_ms == 100.0  # A on the GPU, B on the CPU: max(100, 20 + 30)
    run = run_loop(wf, Scripted([{"A": G, "B": G, "C": C}] * 2), tb, rounds=2, repeats=2)
    assert [r.status for r in run.rounds] == [Status.OOM, Status.OOM]
    assert all(x.elapsed_ms == 20.0 for x in run.all_executions())
    m = run_metrics(run, view)
    # 4 executions x 20 ms wasted, nothing delivered: 80 / (100 x 4)
    assert (m.regret_ms, m.regret) == (80.0, 0.2)
    assert (m.infeasible_executions, m.infeasible_rounds) == (4, 2)
    assert (m.best_match, m.best_round, m.best_ratio, m.final_ratio) == (0, None, None, None)
    assert m.first_equivalent_round is None


def test_mixed_feasible_and_infeasible_regret(make_workflow, no_contention):
    wf = oom_workflow(make_workflow)
    tb = SimTestbed(world=no_contention, noise_sigma=0.0)
    run = run_loop(wf, Scripted([{"A": G, "B": G, "C": C}, {"A": C, "B": C, "C": C}]), tb, rounds=2, repeats=1)
    # OOM at 20 ms (+20), then all-CPU E2E 400 (+300): 320 / (100 x 2)
    assert regret_ms(run.all_executions(), 100.0) == 320.0
    assert regret_fraction(run.all_executions(), 100.0) == 1.6


def test_invalid_proposal_is_a_one_line_policy_error(make_workflow, no_contention):
    wf = one_task(make_workflow)
    with pytest.raises(PolicyError) as e:
        run_loop(
            wf, Scripted([{"A": Mode.GPU_QUEUE}]), SimTestbed(world=no_contention, noise_sigma=0.0), rounds=1, repeats=1
        )
    assert str(e.value) == (
        "policy scripted proposed an invalid mapping in round 0: task A: mode gpu_queue "
        "is outside the binary decision space"
    )


def test_same_seed_same_run(make_workflow, no_contention):
    wf = one_task(make_workflow)
    tb = SimTestbed(world=no_contention, noise_sigma=0.1)
    a = run_loop(wf, Scripted([{"A": C}] * 3), tb, rounds=3, repeats=3, seed=7)
    b = run_loop(wf, Scripted([{"A": C}] * 3), tb, rounds=3, repeats=3, seed=7)
    c = run_loop(wf, Scripted([{"A": C}] * 3), tb, rounds=3, repeats=3, seed=8)
    assert [r.e2e_ms for r in a.rounds] == [r.e2e_ms for r in b.rounds] != [r.e2e_ms for r in c.rounds]


def test_endless_run_has_no_round_count_and_stops_when_the_caller_stops_it(make_workflow, no_contention):
    """rounds=None (a runtime): the policy sees no round count, the loop runs until on_round raises."""
    wf = one_task(make_workflow)
    seen: list[int | None] = []

    class Stop(Exception):
        pass

    class Endless(Scripted):
        def reset(self, ctx):
            super().reset(ctx)
            seen.append(ctx.rounds)

    def on_round(rec):
        if rec.result.round == 4:
            raise Stop

    pol = Endless([{"A": C}] * 10)
    with pytest.raises(Stop):
        run_loop(wf, pol, SimTestbed(world=no_contention, noise_sigma=0.0), rounds=None, repeats=1, on_round=on_round)
    assert seen == [None]


class Watching(Scripted):
    """A Scripted policy that notes what its observe() saw of each execution's timeline."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen_spans: list[int] = []

    def observe(self, result):
        self.seen_spans += [len(x.spans) for x in result.executions]
        return super().observe(result)


def test_records_keep_figures_not_timelines_after_the_policy_observed_them(make_workflow, no_contention):
    wf = make_workflow(
        {"a": {"cpu_ms": 30, "gpu_ms": 10}, "b": {"cpu_ms": 5, "gpu_ms": 20}}, {"A": "a", "B": "b"}, edges=[("A", "B")]
    )
    tb = SimTestbed(world=no_contention, noise_sigma=0.0)
    pol = Watching([{"A": G, "B": C}, {"A": C, "B": C}], probe_on_observe=[{"A": G, "B": G}])
    run = run_loop(wf, pol, tb, rounds=2, repeats=3)
    assert pol.seen_spans == [2] * 6  # the policy saw every task's span of every run
    for rec in run.records:
        runs = rec.result.executions
        assert all(x.spans == () and x.vram_timeline == () for x in (*runs, *rec.probes))
        assert all(x.mapping is rec.result.mapping for x in runs)  # one mapping per round, not a copy per run
        assert [p.mapping for p in rec.probes] == [{"A": G, "B": G}]
    # what metrics, reports and history read is all still there
    assert [x.e2e_ms for x in run.records[0].result.executions] == [15.0] * 3
    assert [x.e2e_ms for x in run.records[1].probes] == [30.0]
    m = run_metrics(run, oracle_view(wf, reference_oracle(wf, tb)))
    assert (m.executions, m.probes, m.best_round, m.best_e2e_ms) == (8, 2, 0, 15.0)


def _run(status: Status, e2e_ms: float | None, **extra: object) -> Execution:
    return Execution(
        status=status,
        mapping={"A": Mode.CPU},
        e2e_ms=e2e_ms,
        elapsed_ms=e2e_ms or 5.0,
        peak_vram_mb=0.0,
        spans=(),
        message="" if status is Status.OK else "it raised",
        extra=extra,
    )


def test_a_round_leaves_out_runs_that_failed_in_host_code(make_workflow):
    wf = make_workflow({"a": {"cpu_ms": 10}}, {"A": "a"})
    host = _run(Status.ERROR, None, failed_node="llm")  # an LLM call around the placed tasks raised
    assert not host.placement_failed
    r = summarize_runs(wf, {"A": Mode.CPU}, [_run(Status.OK, 10.0), host, _run(Status.OK, 30.0)], 0, 3)
    assert r.ok and r.judged and r.e2e_ms == 20.0 and len(r.executions) == 3  # the median of those that ended


def test_a_round_whose_every_run_failed_in_host_code_has_nothing_to_judge(make_workflow):
    wf = make_workflow({"a": {"cpu_ms": 10}}, {"A": "a"})
    host = _run(Status.ERROR, None, failed_node="llm")
    only = summarize_runs(wf, {"A": Mode.CPU}, [host, host], 0, 2)
    assert not only.judged and not only.counts_against(host)  # no verdict on the mapping, either way
    # history stays honest: the runs' real status, no E2E, a message that says why there is no verdict
    assert only.status is Status.ERROR and only.e2e_ms is None and only.executions == (host, host)
    assert only.message == "nothing to judge: every run failed in host code (it raised)"
    # the same mapping failing so in the next round is judged (a failure), another mapping is not
    again = summarize_runs(wf, {"A": Mode.CPU}, [host, host], 1, 4, only)
    assert again.judged and again.counts_against(host) and again.status is Status.ERROR
    assert not summarize_runs(wf, {"A": Mode.GPU_NOW}, [host, host], 1, 4, only).judged
    assert not summarize_runs(wf, {"A": Mode.CPU}, [host, host], 2, 6, again).judged
    # any run that ended, or failed where its placement may be the cause, gives the round a verdict
    for other, status in [
        (_run(Status.OK, 10.0), Status.OK),
        (_run(Status.ERROR, None, failed_task="A"), Status.ERROR),
        (_run(Status.OOM, None), Status.OOM),
    ]:
        r = summarize_runs(wf, {"A": Mode.CPU}, [host, other], 0, 2)
        assert r.judged and r.status is status and "nothing to judge" not in r.message


def test_a_mapping_that_ran_well_is_never_judged_for_host_failures_however_long_they_last():
    """An LLM endpoint down for many rounds under the best mapping: before, its second round was
    judged a failure and the policies dropped their best mapping for good."""
    wf = load_scenario("S5")
    run = run_loop(wf, make_policy("heft"), HostDown(SimTestbed(noise_sigma=0.0), healthy=2), rounds=5, repeats=2)
    assert run.rounds[0].ok and not any(r.judged for r in run.rounds[1:])
    assert len({mapping_key(wf, r.mapping) for r in run.rounds}) == 1 and run.best_round() is run.rounds[0]


@pytest.mark.parametrize(
    "bad",
    [_run(Status.ERROR, None, failed_task="A"), _run(Status.ERROR, None), _run(Status.OOM, None, failed_node="llm")],
)
def test_a_round_with_a_run_its_placement_may_have_failed_is_failed(make_workflow, bad):
    wf = make_workflow({"a": {"cpu_ms": 10}}, {"A": "a"})
    assert bad.placement_failed
    r = summarize_runs(wf, {"A": Mode.CPU}, [bad, _run(Status.ERROR, None, failed_node="llm")], 0, 2)
    assert r.status is bad.status and r.e2e_ms is None and r.counts_against(bad)


def test_a_placed_task_that_raised_while_another_run_ended_well_leaves_the_verdict_to_the_others(make_workflow):
    """A bad request among many served broke a tool: before, that one request failed its round and
    the learner dropped the mapping. An oom still fails it: it is the placement's."""
    wf = make_workflow({"a": {"cpu_ms": 10}}, {"A": "a"})
    raised, oom = _run(Status.ERROR, None, failed_task="A"), _run(Status.OOM, None)
    r = summarize_runs(wf, {"A": Mode.CPU}, [_run(Status.OK, 10.0), raised, _run(Status.OK, 30.0)], 0, 3)
    assert r.ok and r.judged and r.e2e_ms == 20.0 and not r.counts_against(raised)
    r = summarize_runs(wf, {"A": Mode.CPU}, [_run(Status.OK, 10.0), oom], 0, 2)
    assert r.status is Status.OOM and r.counts_against(oom)


def test_a_failed_run_counts_against_its_mapping_unless_it_failed_in_host_code_in_a_round_no_placed_task_failed(
    make_workflow,
):
    wf = make_workflow({"a": {"cpu_ms": 10}}, {"A": "a"})
    host, placed = _run(Status.ERROR, None, failed_node="llm"), _run(Status.ERROR, None, failed_task="A")
    ok_round = summarize_runs(wf, {"A": Mode.CPU}, [_run(Status.OK, 10.0), host], 0, 2)
    assert ok_round.ok and not ok_round.counts_against(host) and not ok_round.counts_against(_run(Status.OK, 1.0))
    failed_round = summarize_runs(wf, {"A": Mode.CPU}, [host, placed], 0, 2)
    assert failed_round.counts_against(host)  # beside a placed task's failure: it may follow from the placement
    assert summarize_runs(wf, {"A": Mode.CPU}, [placed, placed], 0, 2).counts_against(placed)


@pytest.mark.parametrize("policy", ["agent-rules", "agent-plan", "ucb1", "starpu", "heft"])
def test_a_run_whose_every_round_fails_in_host_code_ends_after_its_rounds_holding_nothing_against_a_mapping(policy):
    wf = load_scenario("S5")
    run = run_loop(wf, make_policy(policy), HostDown(SimTestbed(noise_sigma=0.0)), rounds=4, repeats=2)
    first, second = run.rounds[0], run.rounds[1]
    assert run.rounds_total == 4 and not first.judged
    assert first.message == f"nothing to judge: every run failed in host code ({HOST_ERROR})"
    assert all(x.status is Status.ERROR and x.message == HOST_ERROR for r in run.rounds for x in r.executions)
    # no policy moved a task for a failure that is not the mapping's (nor took it as its best) ...
    assert mapping_key(wf, second.mapping) == mapping_key(wf, first.mapping) and run.best_round() is None
    # ... but the same mapping failing so twice in a row is judged: it may be the mapping's after all
    assert second.judged and second.judged_again and second.message.startswith("again, judged a failure")
    # and the same failure under another mapping shows it is no mapping's: never judged from then on
    later = [r for r in run.rounds[2:] if mapping_key(wf, r.mapping) != mapping_key(wf, first.mapping)]
    assert not any(r.judged for r in later) and (later or policy in ("starpu", "heft"))  # those two stay put


@pytest.mark.parametrize("policy", ["agent-rules", "agent-plan", "ucb1", "starpu"])
def test_an_outage_the_testbed_calls_external_is_never_held_against_the_first_mapping(policy):
    wf = load_scenario("S5")
    run = run_loop(
        wf, make_policy(policy), HostDown(SimTestbed(noise_sigma=0.0), failing=6, external=True), rounds=5, repeats=2
    )
    down = [r for r in run.rounds if not any(x.ok for x in r.executions)]  # (probes take some failures too)
    assert len(down) >= 2 and not any(r.judged for r in down)  # from the first round on: nothing to judge
    assert run.rounds[-1].ok and run.best_round() is not None
    # the first mapping was rerun through the outage, never dropped for it
    assert {mapping_key(wf, r.mapping) for r in down} == {mapping_key(wf, run.rounds[0].mapping)}
