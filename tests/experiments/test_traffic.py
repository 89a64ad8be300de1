"""experiments/traffic.py: the capacity of a mix (the rate a baseline sustains)."""

from __future__ import annotations

import pytest

from agentsched.errors import AgentschedError
from agentsched.experiments import traffic, traffic_capacity
from agentsched.experiments.traffic import (
    Machine,
    capacity_per_s,
    isolated_ms,
    isolation_floor,
    make_decider,
    oracle_mappings,
    sustains,
)
from agentsched.scenarios import resolve_workflow

LONG = """name: long-alone
cards: a5500
decision_space: binary
tasks:
  A: {tool: llama_3b, repeat: 1}
  B: {tool: sentiment, repeat: 1}
edges: [[A, B]]
"""


def _long_alone(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(LONG)
    wfs = [resolve_workflow(str(path))]
    machine = Machine(vram_budget_mb=4096.0, cpu_slots=4, noise_sigma=0.0)
    oracle = oracle_mappings(wfs, None)
    return wfs, machine, oracle, lambda: make_decider("dmda", oracle)


def test_a_workflow_longer_than_the_drain_tolerance_is_still_sustained_at_a_slow_rate(tmp_path, monkeypatch):
    """llama_3b never fits 4096 MB: the workflow takes about 20 s alone on the CPU, longer than 5% of a
    10 s study; the drain allowance is then its own isolated latency, not a false 'sustains nothing'."""
    monkeypatch.setattr(traffic_capacity, "MIN_CAPACITY_ARRIVALS", 0)  # the allowance alone, on the study's 10 s
    wfs, machine, oracle, dmda = _long_alone(tmp_path)
    longest = max(isolated_ms(wfs, oracle, machine).values())
    assert longest > 19_000
    rate = 0.2  # two arrivals in the 10 s stream, at 4.8 and 7.7 s
    assert not sustains(wfs, dmda, machine, rate, 10.0)  # the old rule: within 5% of 10 s
    assert sustains(wfs, dmda, machine, rate, 10.0, longest)
    capacity, rates = capacity_per_s(wfs, machine, oracle, 10.0)
    assert capacity > 0 and capacity == max(rates.values())


def test_a_rate_is_judged_on_a_thousand_arrivals_however_short_the_study(tmp_path, monkeypatch):
    """Why: two arrivals in a 10 s stream judge a rate by whether the last one is slow (a tail
    latency), not by a growing backlog."""
    wfs, machine, _, dmda = _long_alone(tmp_path)
    judged: list[int] = []
    real_run = traffic_capacity.run_stream

    def run(workflows, arrivals, decider, **kwargs):
        judged.append(len(arrivals))
        return real_run(workflows, arrivals, decider, **kwargs)

    monkeypatch.setattr(traffic_capacity, "run_stream", run)
    assert sustains(wfs, dmda, machine, 0.2, 10.0)  # 4 CPU slots keep up with a 20 s task at 0.2/s
    assert judged[0] >= 0.9 * traffic_capacity.MIN_CAPACITY_ARRIVALS
    assert not sustains(wfs, dmda, machine, 0.4, 10.0)  # twice that: the backlog grows


class _Searched(Exception):
    pass


def test_the_capacity_search_is_60_s_at_least_whatever_the_study_s_duration(monkeypatch):
    """Why: 30 s search streams put S1+S7's capacity at 5.75/s, 60-240 s ones at 9.9-10.6/s; a load
    must mean one rate whatever --duration-s."""
    searched: list[float] = []

    def rates(workflows, names, machine, oracle, duration_s, longest_ms, **kwargs):
        searched.append(duration_s)
        raise _Searched

    monkeypatch.setattr(traffic, "sustainable_rates", rates)
    for study_s in (20.0, 60.0, 90.0, 300.0):
        with pytest.raises(_Searched):
            traffic.run_load(
                [resolve_workflow("S2")], ["dmda"], machine=Machine(), duration_s=study_s, seeds=1, loads=[0.5]
            )
    assert searched == [60.0, 60.0, 90.0, 120.0]


def test_a_study_too_long_is_refused_before_the_capacity_search(monkeypatch):
    monkeypatch.setattr(traffic, "sustainable_rates", lambda *a, **k: pytest.fail("searched"))
    with pytest.raises(AgentschedError, match="at most 1,000,000 simulated seconds"):
        traffic.run_load([resolve_workflow("S2")], ["dmda"], machine=Machine(), duration_s=1e9, seeds=1, loads=[0.3])


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_rate_of_zero_or_less_is_a_one_line_error(tmp_path, rate):
    from agentsched.errors import TestbedError

    wfs, machine, _, dmda = _long_alone(tmp_path)
    with pytest.raises(TestbedError, match="rate"):
        sustains(wfs, dmda, machine, rate, 10.0)


def _alone_ms(wfs, decider, machine):
    from agentsched.testbeds.arrivals import Arrival
    from agentsched.testbeds.stream import run_stream

    return run_stream(wfs, [Arrival(0.0, 0)], decider, **machine.kwargs(0, noise=False)).latencies_ms()


def test_isolation_is_the_best_alone_on_the_shared_machine_not_the_oracle_of_the_workflow_s_own_budget():
    """S13's oracle is the best on its own budget; on 8192 MB every tool fits and all-gpu is 3x faster
    alone. The old isolation (the oracle's run) understated every slowdown of S13 that much."""
    wfs, machine = [resolve_workflow("S13")], Machine(vram_budget_mb=8192.0, noise_sigma=0.0)
    oracle = oracle_mappings(wfs, None)
    iso = isolated_ms(wfs, oracle, machine)["S13"]
    assert iso <= min(_alone_ms(wfs, make_decider(name, oracle), machine)[0] for name in traffic.ISOLATION_DECIDERS)
    assert iso < 0.5 * _alone_ms(wfs, make_decider("oracle-static", oracle), machine)[0]


def test_isolation_searches_mappings_no_policy_tries(monkeypatch):
    """With no policy to run, the brute force alone finds the workflow's best mapping."""
    monkeypatch.setattr(traffic_capacity, "ISOLATION_DECIDERS", ())
    wfs, machine = [resolve_workflow("S13")], Machine(vram_budget_mb=8192.0, noise_sigma=0.0)
    oracle = oracle_mappings(wfs, None)
    assert isolated_ms(wfs, oracle, machine)["S13"] <= _alone_ms(wfs, make_decider("all-gpu", oracle), machine)[0]
    monkeypatch.setattr(traffic_capacity, "ISOLATION_MAPPINGS", 1)  # too many to search: nothing runs
    with pytest.raises(AgentschedError, match="S13: no mapping tried runs alone"):
        isolated_ms(wfs, oracle, machine)


def test_the_isolation_floor_is_the_percentile_of_the_arrivals_latencies_alone():
    from agentsched.testbeds.arrivals import Arrival

    streams = [[Arrival(0.0, 0), Arrival(1.0, 1), Arrival(2.0, 1)], [Arrival(0.0, 1)]]
    assert isolation_floor(0.5, streams, [100.0, 7.0]) == {"load": 0.5, "p50_ms": 7.0, "p99_ms": 100.0}
    assert isolation_floor(0.5, [[]], [100.0]) == {"load": 0.5, "p50_ms": None, "p99_ms": None}
