"""Runs on the Ray testbed overlap when a Runtime serves invocations at once (``concurrent_runs``):
each overlapping run takes a driver of its own over the one cluster (a real local Ray instance)."""

from __future__ import annotations

import threading
import time

import pytest

import agentsched
from agentsched.model.workflow import Mode
from agentsched.runtime import Runtime, workflow_from_tools
from agentsched.testbeds.spec import TestbedSpec

NAP_S = 1.0  # long beside Ray's per-task overhead, so two overlapping runs show it


class Nap(agentsched.Tool):
    """Sleeps, then says when it ran (wall clock: the Ray workers share this machine's)."""

    name = "nap"
    has_gpu = False
    input_names = ("seconds",)

    def run(self, inputs):
        t0 = time.time()
        time.sleep(inputs["seconds"])
        return [t0, time.time()]


def _two_at_once(rt: Runtime, seconds: float) -> list:
    results = []
    threads = [threading.Thread(target=lambda: results.append(rt.invoke(seconds=seconds))) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return results


@pytest.mark.ray
def test_invocations_served_at_once_run_at_once_on_ray():
    pytest.importorskip("ray")
    w = workflow_from_tools("nap-overlap", {"A": Nap}, [])
    with Runtime(w, store=None, testbed=TestbedSpec(kind="ray", cpu_slots=2)) as rt:
        rt.pin({"A": Mode.CPU})
        # warm-up: the cluster and both its workers (a second worker starting under a loaded machine
        # took over NAP_S once, and the measured naps then ran one after the other)
        assert all(r.ok for r in _two_at_once(rt, 0.3))
        results = _two_at_once(rt, NAP_S)
        assert rt.testbed.concurrent_runs
    assert len(results) == 2 and all(r.ok for r in results), [r.message for r in results]
    (s1, e1), (s2, e2) = (r.outputs["A"] for r in results)
    assert max(s1, s2) < min(e1, e2)  # the two naps overlapped: neither run waited for the other
