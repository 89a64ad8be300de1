"""The monitor's state stays O(1) per mapping and O(window) in rounds (issue 22), with the same
numbers as keeping every run."""

from __future__ import annotations

import random
import statistics

from hypothesis import given
from hypothesis import strategies as st

from agentsched.model import Mode
from agentsched.monitor.measured import Measured
from agentsched.monitor.monitor import HISTORY_ROUNDS


@given(st.lists(st.floats(min_value=1e-3, max_value=1e7, allow_nan=False), min_size=1, max_size=200))
def test_the_running_mean_equals_fmean_of_every_run_bit_for_bit(values):
    m = Measured({"A": Mode.CPU})
    for v in values:
        m.add(v)
    assert m.mean_ms == statistics.fmean(values)
    assert m.samples == len(values) and m.last_ms == values[-1]


def test_the_running_sum_keeps_few_partials_over_many_runs():
    rng = random.Random(0)
    m = Measured({"A": Mode.CPU})
    values = [rng.lognormvariate(5, 1) for _ in range(20_000)]
    for v in values:
        m.add(v)
    assert m.mean_ms == statistics.fmean(values)
    assert len(m._partials) < 40  # bounded by the exponent range, not by the run count


def test_an_infeasible_mapping_has_no_mean():
    m = Measured({"A": Mode.GPU_NOW})
    m.add(10.0)
    m.infeasible = True
    assert m.mean_ms is None and m.samples == 1


def test_the_history_window_drops_the_oldest_rounds(make_workflow):
    from agentsched.loop import run_loop
    from agentsched.loop.registry import make_policy
    from agentsched.testbeds import SimTestbed

    wf = make_workflow({"a": {"cpu_ms": 30, "gpu_ms": 10}}, {"A": "a"})
    policy = make_policy("agent-rules")
    run_loop(wf, policy, SimTestbed(noise_sigma=0.0), rounds=HISTORY_ROUNDS + 6, repeats=1)
    history = policy.monitor.history
    assert len(history) == HISTORY_ROUNDS
    assert history[0].round == 6 and history[-1].round == HISTORY_ROUNDS + 5
