"""The service on the local testbed: two workflows that use one tool share its warm instances, a
warm invocation loads nothing, and /metrics reads the pool's counters (in process, no HTTP)."""

from __future__ import annotations

import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("prometheus_client")

TOOLS = textwrap.dedent("""
    import threading

    import agentsched

    LOADS = []
    LOCK = threading.Lock()


    class Upper(agentsched.Tool):
        name, has_gpu, tags, workload = "upper", False, ("compute-light",), "upper-case a text"
        input_names = ("text",)

        def load(self, device):
            with LOCK:
                LOADS.append(device)

        def run(self, inputs):
            return inputs["text"].upper()


    class Length(agentsched.Tool):
        name, has_gpu, tags, workload = "length", False, ("compute-light",), "length of a text"

        def run(self, inputs):
            return len(next(iter(inputs.values())))
""")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "warm_tools.py").write_text(TOOLS)
    (tmp_path / "one.yaml").write_text(
        'name: one\ntasks:\n  A: {tool: "warm_tools:Upper"}\n  B: {tool: "warm_tools:Length"}\nedges: [[A, B]]\n'
    )
    (tmp_path / "two.yaml").write_text('name: two\ntasks:\n  A: {tool: "warm_tools:Upper"}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_two_workflows_share_warm_tools_and_metrics_count_loads(project, monkeypatch):
    import warm_tools

    from agentsched.testbeds.tool_pool import ToolPool

    pool = ToolPool()  # passed in, its host_pressure None: a busy machine's RAM must not evict here
    from agentsched.service import Engine, ServiceConfig
    from agentsched.service.metrics import Metrics
    from agentsched.testbeds.spec import TestbedSpec

    svc = Engine(
        ServiceConfig(
            workflows=("one.yaml", "two.yaml"),
            store=project / "s.db",
            testbed=TestbedSpec(kind="local", cpu_slots=2),
            round_size=4,
        ),
        pool=pool,
    )
    try:
        before = svc.pool.stats()["loads"]
        gate = threading.Barrier(4)

        def call(i: int):
            gate.wait(timeout=30)
            return svc.invoke("one" if i % 2 else "two", {"text": f"text {i}"})

        with ThreadPoolExecutor(4) as ex:
            first = list(ex.map(call, range(4)))
        assert all(r.ok for r in first)
        loaded = len(warm_tools.LOADS)
        assert 1 <= loaded <= 4  # at most one Upper instance per concurrent use, across both workflows
        again = [svc.invoke("one" if i % 2 else "two", {"text": "x"}) for i in range(6)]
        assert all(r.ok for r in again) and len(warm_tools.LOADS) == loaded  # warm: no load() at all
        assert svc.tools_loaded() >= loaded + 1  # Upper's instances and Length's
        text = Metrics(svc).render()[0].decode()
        loads = float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith("agentsched_tool_loads ")))
        assert loads - before == svc.pool.stats()["loads"] - before >= loaded + 1
        assert "agentsched_tool_hits" in text and "agentsched_vram_resident_mb" in text
    finally:
        svc.close()


def test_a_local_service_keeps_its_own_pool_and_leaves_the_processes_alone(project):
    from agentsched.service import Engine, ServiceConfig
    from agentsched.testbeds.spec import TestbedSpec
    from agentsched.testbeds.tool_pool import shared_pool

    before = (shared_pool().cpu_slots, shared_pool().budget_mb)
    svc = Engine(
        ServiceConfig(workflows=("two.yaml",), store=project / "s.db", testbed=TestbedSpec(kind="local", cpu_slots=3))
    )
    try:
        assert svc.pool is not shared_pool() and svc.pool.cpu_slots == 3  # every invocation shares these 3
        assert (shared_pool().cpu_slots, shared_pool().budget_mb) == before  # never changed, not even for a while
        assert svc.invoke("two", {"text": "x"}).ok and svc.pool.cpu_busy == 0
        assert svc.pool.stats()["loads"] >= 1 and shared_pool().loaded_count() == 0  # its tools are in its own pool
    finally:
        svc.close()
    assert (shared_pool().cpu_slots, shared_pool().budget_mb) == before
