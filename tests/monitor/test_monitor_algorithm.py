"""The runtime monitor (Algorithm 1) on a scripted testbed whose outcomes are known by construction."""

from __future__ import annotations

import json
import re

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.runner import summarize_runs
from agentsched.model.execution import Status
from agentsched.model.workflow import Mode
from agentsched.monitor import MonitorConfig, RuntimeMonitor
from tests.support.host_down import HOST_ERROR, HostDown
from tests.support.scripted_testbed import ScriptedTestbed, mapping, workflow

ALL_ON = {"progressive": False, "confirm": False}  # every mechanism active from round 0, no re-measures


class Harness:
    """Runs rounds by hand: the round's executions on the testbed, then monitor.observe."""

    def __init__(self, wf, tb: ScriptedTestbed, *, warm: bool = True, repeats: int = 2, **config):
        self.wf, self.tb, self.repeats = wf, tb, repeats
        self.probes: list[dict[str, Mode]] = []
        self.round = 0

        def probe(m):
            self.probes.append(dict(m))
            return tb.run(wf, m)

        self.monitor = RuntimeMonitor(
            wf, probe, MonitorConfig.from_options(config), cards=wf.task_cards if warm else None
        )

    def observe(self, m: dict[str, Mode]):
        execs = [self.tb.run(self.wf, m) for _ in range(self.repeats)]
        res = summarize_runs(self.wf, m, execs, self.round, 0)
        self.round += 1
        before = len(self.probes)
        ev = self.monitor.observe(res)
        return ev, self.probes[before:]


def labels(ev) -> list[str]:
    return [w.label for w in ev.whatifs]


def test_reprobes_are_every_single_move_in_task_then_mode_order():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), **ALL_ON)
    base = mapping("now queue cpu cpu")
    ev, probes = h.observe(base)
    assert labels(ev) == [
        "A->cpu",
        "A->gpu_queue",
        "B->cpu",
        "B->gpu_now",
        "C->gpu_now",
        "C->gpu_queue",
        "D->gpu_now",
        "D->gpu_queue",
    ]
    # each reprobe is the base with exactly that task moved, executed once on the testbed
    assert probes == [w.mapping for w in ev.whatifs]
    for w in ev.whatifs:
        moved = [t for t in base if w.mapping[t] is not base[t]]
        assert moved == [w.task] and w.mapping[w.task] is w.mode and w.executed
    assert not [w for w in ev.whatifs if w.kind == "swap"]


def test_binary_reprobes_flip_each_task_once():
    h = Harness(workflow("binary", None), ScriptedTestbed(), **ALL_ON)
    ev, probes = h.observe(mapping("gpu gpu cpu cpu"))
    assert labels(ev) == ["A->cpu", "B->cpu", "C->gpu", "D->gpu"]
    assert len(probes) == 4


def test_cpu_to_queue_reprobe_can_be_switched_off():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), cpu_to_queue_reprobe=False, **ALL_ON)
    ev, _ = h.observe(mapping("now queue cpu cpu"))
    assert labels(ev) == ["A->cpu", "A->gpu_queue", "B->cpu", "B->gpu_now", "C->gpu_now", "D->gpu_now"]


def test_swaps_follow_an_infeasible_gpu_now_reprobe_exactly():
    # budget 800: A(400)+B(300) on gpu_now; C(200) to gpu_now would need 900 -> infeasible;
    # D(50) to gpu_now fits (750). Swaps: C to gpu_now with each current gpu_now task to the queue.
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), **ALL_ON)
    ev, _ = h.observe(mapping("now now cpu cpu"))
    by = {w.label: w for w in ev.whatifs}
    assert not by["C->gpu_now"].ok and by["D->gpu_now"].ok
    swaps = [w for w in ev.whatifs if w.kind == "swap"]
    assert [w.label for w in swaps] == ["SWAP C<->A", "SWAP C<->B"]
    assert swaps[0].mapping == mapping("queue now now cpu")
    assert swaps[1].mapping == mapping("now queue now cpu")
    assert all(w.ok for w in swaps)
    assert ev.memory_pressure and "swaps" in ev.active


def test_no_swaps_without_an_infeasible_gpu_now_reprobe():
    h = Harness(workflow(budget_mb=2000), ScriptedTestbed(), **ALL_ON)
    ev, _ = h.observe(mapping("now now cpu cpu"))
    assert all(w.ok for w in ev.whatifs)
    assert not [w for w in ev.whatifs if w.kind == "swap"]


def test_no_swaps_when_switched_off_or_around_an_infeasible_round():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), swap_reprobe=False, **ALL_ON)
    ev, _ = h.observe(mapping("now now cpu cpu"))
    assert not [w for w in ev.whatifs if w.kind == "swap"]
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), **ALL_ON)
    ev, _ = h.observe(mapping("now now now now"))  # OOM round: its what-ifs, but no swaps
    assert not ev.entry.ok and ev.entry.failed_task == "C"
    assert ev.whatifs and not [w for w in ev.whatifs if w.kind == "swap"]


def test_infeasible_reprobe_is_reported_as_measured():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), **ALL_ON)
    ev, _ = h.observe(mapping("now now cpu cpu"))
    line = next(s for s in ev.summary if s.startswith("what-if C->gpu_now"))
    assert line == "what-if C->gpu_now: INFEASIBLE (900 > 800 MB)"
    assert "SWAP C<->B: " in "\n".join(ev.summary)


def test_reprobes_only_when_the_mapping_changed_and_known_answers_cost_nothing():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), **ALL_ON)
    _, first = h.observe(mapping("now now cpu cpu"))
    assert len(first) == 8
    ev, again = h.observe(mapping("now now cpu cpu"))  # unchanged: no reprobes
    assert again == [] and ev.whatifs == ()
    ev, moved = h.observe(mapping("cpu now cpu cpu"))  # changed: reprobes, earlier answers reused
    assert "reprobes" in ev.active
    reused = [w for w in ev.whatifs if not w.executed]
    # the earlier round's mapping and the earlier probe of A on the queue are not run again
    assert [w.label for w in reused] == ["A->gpu_now", "A->gpu_queue"]
    assert len(moved) == len(ev.whatifs) - len(reused)


def test_hints_only_on_stagnation_and_never_a_mapping():
    wf = workflow(budget_mb=800)
    h = Harness(wf, ScriptedTestbed(), swap_reprobe=False, **ALL_ON)
    base = mapping("now now cpu cpu")
    ev0, _ = h.observe(base)
    assert ev0.hints == ()  # first round: nothing is stagnant
    ev1, _ = h.observe(base)
    assert ev1.hints, "a repeated mapping with an unexplored feasible placement gets a hint"
    hinted = {(x.task, x.mode) for x in ev1.hints}
    assert ("C", Mode.GPU_NOW) in hinted  # its gpu_now reprobe was infeasible and no swap ran
    c = next(x for x in ev1.hints if (x.task, x.mode) == ("C", Mode.GPU_NOW))
    assert c.vram_mb == 200 and c.free_mb == 100  # 800 - (400 + 300)
    for x in ev1.hints:
        assert not re.search(r"[A-D]=\w+", x.text), x.text  # a hint names a placement, never a mapping
    ev2, _ = h.observe(mapping("cpu now cpu cpu"))  # moved on: no hint
    assert ev2.hints == ()


def test_hints_switch_and_unstagnant_runs():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), swap_reprobe=False, hints=False, **ALL_ON)
    base = mapping("now now cpu cpu")
    h.observe(base)
    ev, _ = h.observe(base)
    assert ev.hints == ()


def test_probe_budget_and_per_round_cap():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), probe_budget=3, **ALL_ON)
    ev, probes = h.observe(mapping("now now cpu cpu"))
    assert len(probes) == 3 and ev.probes == 3 and ev.probes_total == 3
    assert "note: probe budget exhausted" in ev.summary
    ev, probes = h.observe(mapping("cpu cpu cpu cpu"))
    assert probes == [] and ev.probes_total == 3
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), max_probes_per_round=2, **ALL_ON)
    _, p0 = h.observe(mapping("now now cpu cpu"))
    _, p1 = h.observe(mapping("cpu cpu cpu cpu"))
    assert len(p0) == 2 and len(p1) == 2


def test_running_averages_use_a_sliding_window():
    wf = workflow(budget_mb=None)
    tb = ScriptedTestbed(slowdown=2.0)
    h = Harness(wf, tb, window=3, repeats=1, **{**ALL_ON, "reprobe": False})
    h.observe(mapping("now now cpu cpu"))
    tb.slowdown = 4.0
    h.observe(mapping("now now cpu cpu"))
    ev, _ = h.observe(mapping("now now cpu cpu"))
    avg = {(a.task, a.mode): a for a in ev.averages}
    # A on gpu_now: 200, 400, 400 ms in the window of 3
    assert avg[("A", Mode.GPU_NOW)].mean_ms == pytest.approx(1000 / 3)
    assert avg[("A", Mode.GPU_NOW)].samples == 3 and avg[("A", Mode.GPU_NOW)].card_ms == 100
    assert avg[("C", Mode.CPU)].mean_ms == 600
    assert "running avg A gpu_now 333 ms" in ev.summary
    tb.slowdown = 1.0
    ev, _ = h.observe(mapping("now now cpu cpu"))
    assert {(a.task, a.mode): a for a in ev.averages}[("A", Mode.GPU_NOW)].mean_ms == pytest.approx(300)
    assert ("D", Mode.GPU_QUEUE) in ev.unobserved and ("A", Mode.GPU_NOW) not in ev.unobserved


def test_progressive_activation_warm():
    # no budget, GPU latencies as the cards say: neither factor -> history only
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), confirm=False)
    ev, probes = h.observe(mapping("now now cpu cpu"))
    assert ev.active == ("history",) and probes == [] and ev.averages == ()
    assert not ev.contention and not ev.memory_pressure
    # contention (GPU 50% slower than the cards): running averages and reprobes, no swaps or hints
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(slowdown=1.5), confirm=False)
    ev, probes = h.observe(mapping("now now cpu cpu"))
    assert ev.contention and not ev.memory_pressure
    assert ev.active == ("history", "running_averages", "reprobes") and probes
    # memory pressure (budget below the total VRAM): swaps appear
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), confirm=False)
    ev, _ = h.observe(mapping("now now cpu cpu"))
    assert ev.memory_pressure and not ev.contention
    assert "reprobes" in ev.active and "swaps" in ev.active and "running_averages" not in ev.active


def test_cold_start_reprobes_without_factors():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), warm=False, confirm=False)
    ev, probes = h.observe(mapping("cpu cpu cpu cpu"))
    assert "reprobes" in ev.active and len(probes) == 8
    assert ev.observed_vram_mb["A"] == 400  # learnt from the probe that put A on the GPU


def test_monitor_off_keeps_history_only():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), enabled=False)
    ev, probes = h.observe(mapping("now now now now"))
    ev, probes2 = h.observe(mapping("now now cpu cpu"))
    assert probes == probes2 == [] and ev.whatifs == () and ev.hints == () and ev.averages == ()
    assert [x.round for x in h.monitor.history] == [0, 1]
    assert ev.best is not None and ev.best.mapping == mapping("now now cpu cpu")


def test_best_ever_and_history():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(), **{**ALL_ON, "reprobe": False})
    h.observe(mapping("cpu cpu cpu cpu"))  # 1000
    h.observe(mapping("now now now now"))  # OOM
    ev, _ = h.observe(mapping("now now cpu cpu"))  # 600 (C on cpu)
    assert ev.best.mapping == mapping("now now cpu cpu") and ev.best.e2e_ms == 600
    assert ev.best.first_round == 2 and ev.best.samples == 2
    hist = h.monitor.history
    assert [x.ok for x in hist] == [True, False, True]
    assert hist[1].peak_vram_mb == 900 and hist[0].peak_vram_mb == 0


def test_confirm_re_measures_close_what_ifs_on_stagnation():
    tb = ScriptedTestbed()
    h = Harness(workflow(budget_mb=None), tb, progressive=False, confirm_margin=2.0, confirm_samples=3, confirm_top=2)
    base = mapping("now now now cpu")  # E2E 150 (D on cpu)
    h.observe(base)
    ev, probes = h.observe(base)
    # within 200% above the best: D->gpu_now 100, C->gpu_queue 300, B->gpu_queue 400 ms; the 2 closest
    # ones are re-measured until they have 3 samples each
    assert {w.kind for w in ev.whatifs} == {"confirm"} and len(probes) == 4
    assert [w.label for w in ev.whatifs] == ["D->gpu_now", "D->gpu_now", "C->gpu_queue", "C->gpu_queue"]
    assert ev.whatifs[-1].samples == 3


def test_evidence_is_json_and_summary_lines():
    h = Harness(workflow(budget_mb=800), ScriptedTestbed(slowdown=1.5))
    ev, _ = h.observe(mapping("now now cpu cpu"))
    d = json.loads(json.dumps(ev.to_dict()))
    assert isinstance(d["summary"], list) and all(isinstance(s, str) for s in d["summary"])
    assert d["entry"]["mapping"] == {"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "cpu"}
    assert any(s.startswith("running avg A ") for s in d["summary"])


def test_config_rejects_unknown_and_bad_options():
    with pytest.raises(PolicyError, match="unknown monitor option"):
        MonitorConfig.from_options({"swaps": False})
    with pytest.raises(PolicyError, match="true or false"):
        MonitorConfig.from_options({"hints": "no"})
    with pytest.raises(PolicyError, match="window"):
        MonitorConfig.from_options({"window": 0})
    assert MonitorConfig.from_options({"probe_budget": None}).probe_budget is None
    assert MonitorConfig.from_options({"hints": False}).differences() == {"hints": False}


def test_an_outside_exploration_budget_defers_reprobes_to_the_next_rounds():
    """probe_allowed (the runtime's share of invocations) cuts reprobes short; they resume around the
    same mapping in its next rounds, measured ones answered from memory, until all are done."""
    allowed = {"n": 3}
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), **ALL_ON)
    h.monitor.probe_allowed = lambda: allowed["n"] > 0

    def probe_counting(m, inner=h.monitor.probe_fn):
        allowed["n"] -= 1
        return inner(m)

    h.monitor.probe_fn = probe_counting
    base = mapping("now queue cpu cpu")
    ev, probes = h.observe(base)
    assert len(probes) == 3 and "note: exploration budget exhausted" in ev.summary
    ev, probes = h.observe(base)  # same mapping, nothing allowed: nothing runs, still deferred
    assert probes == [] and "note: exploration budget exhausted" in ev.summary
    allowed["n"] = 10
    ev, probes = h.observe(base)
    assert len(probes) == 5  # the 8 single moves: 3 answered from memory, 5 measured now
    assert len(ev.whatifs) == 8 and sum(w.executed for w in ev.whatifs) == 5
    ev, probes = h.observe(base)
    assert probes == [] and "reprobes" not in ev.active  # done: an unchanged mapping is not reprobed


def test_without_an_outside_budget_an_unchanged_mapping_is_not_reprobed():
    h = Harness(workflow(budget_mb=None), ScriptedTestbed(), max_probes_per_round=2, **ALL_ON)
    base = mapping("now queue cpu cpu")
    _, p0 = h.observe(base)
    _, p1 = h.observe(base)
    assert len(p0) == 2 and p1 == []  # the per-round cap does not defer (bench behaviour unchanged)


def test_a_round_with_nothing_to_judge_is_not_reported_as_its_mappings_failure():
    tb = HostDown(ScriptedTestbed(), failing=2)  # the first round's two runs fail in host code
    h = Harness(workflow(budget_mb=800), tb, **{**ALL_ON, "reprobe": False})
    m = mapping("now now cpu cpu")
    ev, _ = h.observe(m)
    entry = h.monitor.history[-1]
    assert not entry.judged and entry.status is Status.ERROR and HOST_ERROR in entry.message  # honest history
    assert entry.failed_task is None and ev.to_dict()["entry"]["judged"] is False
    # nothing recorded of the mapping: not infeasible, no best, no timings
    assert h.monitor.measured(m) is None and h.monitor.measured_mappings() == [] and ev.best is None
    assert h.monitor.averages() == [] and h.monitor.observed_vram_mb == {}
    assert "note: R0 had nothing to judge: every run failed in host code, not the mapping's doing" in ev.summary
    ev, _ = h.observe(m)  # the endpoint is back: the same mapping is judged
    assert h.monitor.history[-1].judged and ev.best is not None and ev.best.mapping == m
    assert (ev.best.first_round, ev.best.samples) == (1, 2) and not any("nothing to judge" in s for s in ev.summary)


def test_what_ifs_that_failed_in_host_code_do_not_read_as_infeasible_mappings():
    # the round's two runs end well, then the endpoint goes down: its what-ifs fail in host code
    h = Harness(workflow(budget_mb=None), HostDown(ScriptedTestbed(), healthy=2), **ALL_ON)
    base = mapping("now queue cpu cpu")
    ev, probes = h.observe(base)
    assert probes and all(not w.ok for w in ev.whatifs)
    # no mean of None for them: nothing was measured of them (only the round's mapping was)
    assert [m for m, *_ in h.monitor.measured_mappings()] == [base]


def test_a_round_with_nothing_to_judge_spends_no_probe():
    """Its what-ifs would fail in the same host code; before, each read as an infeasible mapping."""
    h = Harness(workflow(budget_mb=None), HostDown(ScriptedTestbed(), failing=2), **ALL_ON)
    ev, probes = h.observe(mapping("now queue cpu cpu"))
    assert not h.monitor.history[-1].judged and probes == [] and ev.active == ("history",)
    ev, probes = h.observe(mapping("now queue cpu cpu"))  # the rerun, judged: its neighbourhood is probed
    assert h.monitor.history[-1].judged and probes and all(w.ok for w in ev.whatifs)


def test_the_failed_task_named_is_that_of_the_run_the_round_is_judged_by():
    """A bad input broke A in one run, another run ended, a third ran out of VRAM starting B: the
    round is an oom of B; before, the monitor named A (the first run held against the mapping), and
    the rules' repair moved the wrong task."""
    import dataclasses

    wf = workflow(budget_mb=800)
    m = mapping("now now cpu cpu")
    monitor = RuntimeMonitor(
        wf, lambda mp: None, MonitorConfig.from_options({**ALL_ON, "reprobe": False}), cards=wf.task_cards
    )
    x = ScriptedTestbed().run(wf, m)
    bad = dataclasses.replace(x, status=Status.ERROR, e2e_ms=None, message="A raised", extra={"failed_task": "A"})
    oom = dataclasses.replace(x, status=Status.OOM, e2e_ms=None, message="B oom", extra={"failed_task": "B"})
    res = summarize_runs(wf, m, [bad, x, oom], 0, 3)
    assert res.status is Status.OOM and res.message == "B oom"
    monitor.observe(res)
    assert monitor.history[-1].failed_task == "B"
