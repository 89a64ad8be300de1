"""The simulator as a driver backend gives bit-identical executions to the simulator before the
driver existed: same rng draw order, same float arithmetic (digests recorded at commit 521dba8)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from agentsched import SimTestbed, list_scenarios, load_scenario
from agentsched.model.execution import Execution
from agentsched.model.mapping import enumerate_mappings
from agentsched.model.workflow import Mode
from agentsched.testbeds.driver import Driver
from agentsched.testbeds.sim import SimBackend

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "sim_digest_v0_1.json").read_text())["digests"]


def canon(ex: Execution) -> str:
    """Everything an execution records that v0.1 recorded, floats in full precision (``held_by``, the
    tasks holding VRAM when a start is refused, came later: tests/planner/test_vram.py checks it)."""
    return repr(
        (
            ex.status.value,
            ex.e2e_ms,
            ex.elapsed_ms,
            ex.peak_vram_mb,
            ex.vram_timeline,
            ex.message,
            sorted((k, v) for k, v in ex.extra.items() if k != "held_by"),
            [(s.task, s.mode.value, s.ready_ms, s.start_ms, s.end_ms, s.load_ms, s.vram_mb) for s in ex.spans],
        )
    )


@pytest.mark.parametrize("name", list_scenarios())
def test_every_execution_is_bit_identical_to_the_pre_driver_simulator(name):
    wf = load_scenario(name)
    h = hashlib.sha256()
    tb = SimTestbed(noise_sigma=0.05, seed=7)
    rng = random.Random(f"golden:{name}")
    for m in enumerate_mappings(wf):
        h.update(canon(tb.expected(wf, m)).encode())
        h.update(canon(tb.run(wf, m, rng=rng)).encode())
        h.update(canon(tb.run(wf, m)).encode())
    assert h.hexdigest() == GOLDEN[name]


def test_sim_testbed_is_a_driver_over_the_sim_backend():
    tb = SimTestbed(noise_sigma=0.0)
    assert isinstance(tb, Driver) and isinstance(tb.backend, SimBackend)
    assert (tb.name, tb.deterministic, tb.world.name) == ("sim", True, "a5500")
    assert SimTestbed(noise_sigma=0.03).deterministic is False


def test_expected_is_noise_free_whatever_the_noise():
    wf = load_scenario("S5")
    m = {t: Mode.GPU_NOW for t in wf.task_ids}
    noisy, exact = SimTestbed(noise_sigma=0.5), SimTestbed(noise_sigma=0.0)
    assert canon(noisy.expected(wf, m)) == canon(exact.run(wf, m)) == canon(exact.expected(wf, m))
    assert noisy.run(wf, m).e2e_ms != exact.run(wf, m).e2e_ms


def test_the_simulator_computes_no_outputs():
    wf = load_scenario("S2")
    ex = SimTestbed().run(wf, {t: Mode.CPU for t in wf.task_ids}, inputs={"query": "x"})
    assert ex.ok and ex.outputs == {}
