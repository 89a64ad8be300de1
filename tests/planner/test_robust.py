"""agent-plan's failure stories (issue 17) as regressions on small generated workflows: a mapping that ran
out of memory is never run again under the same conditions, the run never ends worse than what it
measured, a proposal is never a mapping measured worse than another beyond the noise, a drifting
machine is noticed and followed, a stationary one is not flagged, an endless run works."""

from __future__ import annotations

import random
import statistics

import pytest

from agentsched.loop.metrics import oracle_view
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import reference_oracle, run_loop
from agentsched.model.generate import generate_workflow
from agentsched.model.rounds import RoundResult
from agentsched.policies.base import PolicyContext
from agentsched.testbeds.sim import SimTestbed

# VRAM-tight three-way workflows in perturbed worlds where the noise-free oracle is fragile: under
# noise its gpu_now starts race, and the old planner re-ran out-of-memory mappings or settled worse
TIGHT = [("layered", 0.6, 70, "perturbed:7"), ("random", 0.6, 52, "perturbed:5")]


def key(wf, m):
    return tuple(m[t] for t in wf.task_ids)


@pytest.mark.parametrize("topology, tightness, seed, world", TIGHT)
def test_a_mapping_that_only_ran_out_of_memory_is_never_run_again(topology, tightness, seed, world):
    wf = generate_workflow(tasks=8, topology=topology, space="three_way", budget_tightness=tightness, seed=seed)
    tb = SimTestbed(noise_sigma=0.03, world=world)
    run = run_loop(wf, make_policy("agent-plan"), tb, rounds=12, repeats=5, seed=seed % 10)
    failed: set[tuple] = set()
    ok: set[tuple] = set()
    ooms = 0
    for rec in run.records:
        barred = failed - ok  # a mapping that also ran clean is judged by its failure rate instead (issue 45)
        for x in rec.probes:
            assert key(wf, x.mapping) not in barred, f"probe re-ran a mapping that failed (round {rec.result.round})"
        assert key(wf, rec.result.mapping) not in barred, f"round {rec.result.round} re-ran a mapping that failed"
        for x in (*rec.probes, *rec.result.executions):
            (ok if x.ok else failed).add(key(wf, x.mapping))
            ooms += not x.ok
    assert ooms >= 1  # the story needs a race: the test means something only if memory ran out
    # never stuck worse than measured: the final mapping is within 2% of the best clean mapping it ran
    view = oracle_view(wf, reference_oracle(wf, tb))
    best = min(view.reference(dict(zip(wf.task_ids, k, strict=True))) for k in ok - failed)
    assert view.reference(run.rounds[-1].mapping) <= 1.02 * best


@pytest.mark.parametrize("world", ["a5500-threshold", "perturbed:11"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_never_proposes_a_mapping_measured_worse_beyond_the_noise(world, seed):
    rng = random.Random(seed)
    wf = generate_workflow(
        tasks=rng.randint(5, 7), topology="random", space="three_way", budget_tightness=0.3, seed=500 + seed
    )
    run = run_loop(
        wf, make_policy("agent-plan"), SimTestbed(noise_sigma=0.03, world=world), rounds=10, repeats=5, seed=seed
    )
    seen: dict[tuple, list[float]] = {}
    for rec in run.records:
        assert "change" not in (rec.evidence or {}) and "change" not in rec.proposal_info  # stationary world
        for x in rec.probes:  # the proposal is made after its probes
            if x.ok:
                seen.setdefault(key(wf, x.mapping), []).append(x.e2e_ms)
        mine = seen.get(key(wf, rec.result.mapping))
        if mine and rec.result.round > 0:
            best = min(statistics.median(v) for v in seen.values())
            assert statistics.median(mine) <= best * 1.06, f"round {rec.result.round} chose a mapping measured worse"
        for x in rec.result.executions:
            if x.ok:
                seen.setdefault(key(wf, x.mapping), []).append(x.e2e_ms)


def test_a_drifting_machine_is_detected_and_followed():
    wf = generate_workflow(tasks=8, topology="fan-out", space="binary", budget_tightness=0.0, seed=3274)
    before, after = "a5500", "perturbed:574"
    vb = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=after)))
    va = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=before)))
    assert not vb.equivalent(va.best)  # the best mapping changes with the machine
    run = run_loop(
        wf,
        make_policy("agent-plan"),
        SimTestbed(noise_sigma=0.03, world=f"drift:{before},{after},10"),
        rounds=16,
        repeats=5,
        seed=6,
    )
    detected = [rec.result.round for rec in run.records if "change" in (rec.evidence or {})]
    assert detected and min(detected) >= 10  # no false alarm before the switch
    det = next(rec.evidence["change"] for rec in run.records if "change" in (rec.evidence or {}))
    assert det["epoch"] == 1 and det["detections"][0]["source"] in {"measured", "tasks", "model"}
    assert any(vb.equivalent(r.mapping) for r in run.rounds[10:15])
    assert vb.equivalent(run.rounds[-1].mapping)


def test_an_endless_run_has_a_growing_probe_allowance():
    wf = generate_workflow(tasks=6, topology="layered", space="three_way", budget_tightness=0.3, seed=4)
    tb = SimTestbed(noise_sigma=0.03)
    rng = random.Random(0)
    probes = []

    def probe(m):
        x = tb.run(wf, m, rng=rng)
        probes.append(x)
        return x

    pol = make_policy("agent-plan")
    pol.reset(
        PolicyContext(workflow=wf, cards=dict(wf.task_cards), rng=random.Random(1), probe=probe, rounds=None, repeats=5)
    )  # type: ignore[arg-type]
    allowed = []
    for i in range(6):
        p = pol.propose(i)
        allowed.append(p.info["probe_budget"]["allowed"])
        xs = [tb.run(wf, p.mapping, rng=rng) for _ in range(5)]
        pol.observe(
            RoundResult(i, p.mapping, xs[0].status, statistics.median(x.e2e_ms for x in xs), 0.0, 0.0, tuple(xs), 0)
        )
    assert allowed == sorted(allowed) and allowed[-1] > allowed[0]
    assert len(probes) <= allowed[-1]
