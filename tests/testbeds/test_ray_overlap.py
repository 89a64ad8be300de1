"""Runs on the Ray testbed overlap when a Runtime serves invocations at once (``concurrent_runs``):
each overlapping run takes a driver of its own over the one cluster (a real local Ray instance)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import agentsched
from agentsched.model.workflow import Mode
from agentsched.runtime import Runtime, workflow_from_tools
from agentsched.testbeds.spec import TestbedSpec

MEET_S = 60.0  # how long a run waits for the other one to be running too


class Meet(agentsched.Tool):
    """Marks that it runs (a file in ``dir``), then waits until two runs have marked it: the number it
    saw. Two runs that overlap both see 2; runs one after the other leave the first alone (it sees 1
    after ``MEET_S``). Why not wall-clock spans: on a loaded machine a Ray worker may start a
    second late, and spans of a 1 s nap then failed to overlap though the runs were concurrent."""

    name = "meet"
    has_gpu = False
    input_names = ("dir",)

    def run(self, inputs):
        folder = Path(inputs["dir"])
        (folder / uuid.uuid4().hex).touch()
        deadline = time.monotonic() + MEET_S
        while len(list(folder.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(list(folder.iterdir()))


def _two_at_once(rt: Runtime, folder: Path) -> list:
    folder.mkdir()
    results = []
    threads = [threading.Thread(target=lambda: results.append(rt.invoke(dir=str(folder)))) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(2 * MEET_S + 60)
    return results


@pytest.mark.ray
def test_invocations_served_at_once_run_at_once_on_ray(tmp_path):
    pytest.importorskip("ray")
    w = workflow_from_tools("meet-overlap", {"A": Meet}, [])
    with Runtime(w, store=None, testbed=TestbedSpec(kind="ray", cpu_slots=2)) as rt:
        rt.pin({"A": Mode.CPU})
        results = _two_at_once(rt, tmp_path / "meet")
        assert rt.testbed.concurrent_runs
    assert len(results) == 2 and all(r.ok for r in results), [r.message for r in results]
    assert [r.outputs["A"] for r in results] == [2, 2]  # each run was running while the other was
