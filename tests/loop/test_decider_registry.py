"""One registry for the deciders of a shared machine (``loop/registry.decider_by_name``), and their
one contract (``model/live.Decider``)."""

from __future__ import annotations

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.registry import DECIDERS, decider_by_name
from agentsched.model.live import Decider, MachineSnapshot, PlanDecider
from agentsched.model.workflow import Mode
from agentsched.planner.traffic import TrafficPlanner
from agentsched.policies.traffic.baselines import WithAdmission
from agentsched.scenarios import load_scenario


def test_every_registered_decider_builds_under_its_own_name():
    oracle = {"S1": dict.fromkeys(load_scenario("S1").task_ids, Mode.CPU)}
    for name in DECIDERS:
        d = decider_by_name(name, oracle=oracle)
        assert isinstance(d, Decider) and d.name == name


def test_the_traffic_aware_decider_and_its_old_name():
    d = decider_by_name("traffic-aware")
    assert isinstance(d, TrafficPlanner) and d.admission and d.late_binding
    assert not decider_by_name("traffic-aware-noadm").admission
    assert decider_by_name("agentsched").name == "traffic-aware"  # the name before the rename still works
    assert isinstance(decider_by_name("dmda+adm"), WithAdmission)


def test_bad_names_and_options_are_one_line_errors():
    with pytest.raises(PolicyError, match="unknown decider 'nope'.*traffic-aware"):
        decider_by_name("nope")
    with pytest.raises(PolicyError, match="takes no option 'speed'"):
        decider_by_name("traffic-aware", speed=2)
    with pytest.raises(PolicyError, match="oracle mapping"):
        decider_by_name("oracle-static")
    with pytest.raises(PolicyError, match="fixed|takes no option 'admission'"):
        decider_by_name("traffic-aware", admission=False)  # the entry fixes it


def test_the_contract_is_abstract_and_a_snapshot_is_frozen():
    class Half(Decider):  # decides nothing: not a decider
        def admit(self, inv, snap):
            return True

    with pytest.raises(TypeError):
        Half()

    class Plans(PlanDecider):
        def plan(self, inv, snap):
            return {}

    assert Plans().admit(None, None)  # admits every invocation
    snap = MachineSnapshot(0.0, 1, 100.0, 40.0, 4, 1, 0, 0, 0, 1, 0.0, 0.0)
    assert snap.fits_now(60.0) and not snap.fits_now(60.5)
    with pytest.raises(AttributeError):
        snap.vram_in_use_mb = 0.0  # type: ignore[misc]


def test_the_traffic_aware_constants_are_one_validated_constructor_parameter():
    from pydantic import ValidationError

    from agentsched.planner.traffic_config import TrafficConfig

    d = decider_by_name("traffic-aware", config={"hold_margin": 0.5, "max_held": 8})
    assert d.config == TrafficConfig(hold_margin=0.5, max_held=8) and d.config.harm_weight == 2.0
    assert TrafficPlanner().config == TrafficConfig()  # the tuned defaults
    for bad in ({"hold_margin": 0.0}, {"admit_slowdown": 0.5}, {"door_tau_ms": float("nan")}, {"typo": 1.0}):
        with pytest.raises(ValidationError):
            TrafficPlanner(config=bad)


def test_a_config_changes_the_decisions():
    """The constants are used, not merely stored: a decider that never holds places at once what the
    default holds (a crowded GPU, VRAM that fits)."""
    import random

    from agentsched.testbeds.arrivals import make_arrivals
    from agentsched.testbeds.stream import run_stream

    mix = [load_scenario(n) for n in ("S1", "S4", "S7")]
    arrivals = make_arrivals(
        "poisson", rate_per_s=6.0, duration_s=10.0, names=[w.name for w in mix], rng=random.Random(1)
    )
    kw = {"vram_budget_mb": 8192.0, "cpu_slots": 4, "noise_sigma": 0.0, "seed": 1}
    base = run_stream(mix, arrivals, decider_by_name("traffic-aware"), **kw)
    other = run_stream(
        mix, arrivals, decider_by_name("traffic-aware", config={"harm_weight": 0.0, "admit_slowdown": 50.0}), **kw
    )
    assert [(i.end_ms, dict(i.mapping)) for i in base.invocations] != [
        (i.end_ms, dict(i.mapping)) for i in other.invocations
    ]


def test_a_tuned_constant_is_an_option_by_its_own_name():
    from agentsched.loop.registry import decider_options

    opts = decider_options("traffic-aware")
    assert opts["hold_margin"] == 0.4 and opts["max_held"] == 64 and "admission" not in opts
    assert decider_by_name("traffic-aware", hold_margin=0.5).config.hold_margin == 0.5
    assert decider_options("dmda") == {}
