"""Issue 13 item 10: HEFT's machine model. ``parallel`` (the GPU runs tasks side by side at isolated
speed) against ``classical`` (one task at a time per processor, Topcuoglu et al.) on small DAGs."""

from __future__ import annotations

import random

import pytest

from agentsched.errors import PolicyError
from agentsched.loop.registry import make_policy
from agentsched.model import Mode
from agentsched.policies.heft import MACHINE_MODELS

G, C = Mode.GPU_NOW, Mode.CPU


def _plan(policy, wf, make_context):
    policy.reset(make_context(wf))
    return policy.plan


def _random_wf(make_workflow, seed: int):
    rng = random.Random(seed)
    n = rng.randrange(3, 8)
    cards = {
        f"t{i}": {"cpu_ms": rng.choice([20, 50, 100, 200]), "gpu_ms": rng.choice([None, 5, 30, 60, 150])}
        for i in range(n)
    }
    tasks = {f"T{i}": f"t{i}" for i in range(n)}
    edges = {(f"T{j}", f"T{i}") for i in range(1, n) for j in range(i) if rng.random() < 0.3}
    return make_workflow(cards, tasks, tuple(sorted(edges)))


def test_two_gpu_friendly_tasks_share_the_gpu_only_in_the_parallel_model(make_workflow, make_context):
    # x: 100 ms on the CPU, 60 ms on the GPU; two independent calls
    wf = make_workflow({"x": {"cpu_ms": 100, "gpu_ms": 60}}, {"A": "x", "B": "x"})
    par = _plan(make_policy("heft"), wf, make_context)
    assert {t: p.mode for t, p in par.items()} == {"A": G, "B": G}  # both at once, 60 ms each
    cls = _plan(make_policy("heft", machine="classical"), wf, make_context)
    # classical: A on the GPU [0, 60]; B would wait and finish at 120 > 100 on the CPU
    assert {t: p.mode for t, p in cls.items()} == {"A": G, "B": C}
    assert (cls["A"].start_ms, cls["A"].finish_ms, cls["B"].finish_ms) == (0, 60, 100)


def test_classical_queues_on_the_gpu_when_that_still_wins(make_workflow, make_context):
    wf = make_workflow({"x": {"cpu_ms": 100, "gpu_ms": 30}}, {"A": "x", "B": "x", "C": "x"})
    cls = _plan(make_policy("heft", machine="classical"), wf, make_context)
    assert [(cls[t].mode, cls[t].start_ms, cls[t].finish_ms) for t in "ABC"] == [(G, 0, 30), (G, 30, 60), (G, 60, 90)]


@pytest.mark.parametrize("seed", range(12))
def test_classical_plans_never_overlap_on_one_processor(make_workflow, make_context, seed):
    wf = _random_wf(make_workflow, seed)
    for cores in (None, 2):
        plan = _plan(make_policy("heft", machine="classical", cpu_cores=cores), wf, make_context)
        by_proc: dict[str, list[tuple[float, float]]] = {}
        for p in plan.values():
            by_proc.setdefault(p.processor, []).append((p.start_ms, p.finish_ms))
            assert all(plan[q].finish_ms <= p.start_ms + 1e-9 for q in wf.preds[p.task])
        for slots in by_proc.values():
            slots.sort()
            assert all(a[1] <= b[0] + 1e-9 for a, b in zip(slots, slots[1:], strict=False))
        assert len([k for k in by_proc if k.startswith("cpu")]) <= (cores or 1)


@pytest.mark.parametrize("seed", range(12))
def test_heft_cf_equals_heft_in_the_classical_model(make_workflow, make_context, seed):
    # no two GPU tasks overlap there, so the contention factor never applies
    wf = _random_wf(make_workflow, seed)
    base = _plan(make_policy("heft", machine="classical"), wf, make_context)
    for factor in (0.5, 5.0):
        cf = _plan(make_policy("heft-cf", machine="classical", contention_factor=factor), wf, make_context)
        assert cf == base


@pytest.mark.parametrize("seed", range(12))
def test_parallel_model_is_each_task_on_its_faster_device(make_workflow, make_context, seed):
    wf = _random_wf(make_workflow, seed)
    plan = _plan(make_policy("heft"), wf, make_context)
    for t, p in plan.items():
        c = wf.task_cards[t]
        faster_gpu = c.gpu_ms is not None and c.gpu_ms < c.cpu_ms
        assert p.mode is (G if faster_gpu else C)


def test_machine_option_is_checked_and_labelled():
    assert MACHINE_MODELS == ("parallel", "classical")
    with pytest.raises(PolicyError, match="machine must be one of parallel, classical, got 'serial'"):
        make_policy("heft", machine="serial")
    assert make_policy("heft-cf", machine="classical").label == "heft-cf (classical machine)"
    assert make_policy("heft").label == "heft"


def test_cli_heft_model(cli):
    code, out, err = cli("run", "S5", "-p", "heft", "--heft-model", "classical", "--rounds", "1", "--repeats", "1")
    assert code == 0 and "policy heft (classical machine)" in out, err
    code, _, err = cli("run", "S5", "-p", "ucb1", "--heft-model", "classical")
    assert code == 2 and "--heft-model applies only to heft and heft-cf" in err
    code, _, err = cli("bench", "--scenarios", "S1", "--policies", "heft", "--heft-model", "both")
    assert code == 2 and "Invalid value for '--heft-model': 'both' is not one of 'parallel', 'classical'" in err
