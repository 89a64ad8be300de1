"""The service in-process (no HTTP): the history view asks the store for the newest N rows, not all."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from agentsched.service.service import Service, ServiceConfig  # noqa: E402
from agentsched.testbeds.spec import TestbedSpec  # noqa: E402


def test_history_reads_the_newest_n_with_sql_limit(tmp_path, monkeypatch):
    svc = Service(ServiceConfig(workflows=("S1",), store=tmp_path / "s.db", testbed=TestbedSpec(kind="sim")))
    try:
        ids = [svc.invoke("S1", {}).invocation_id for _ in range(4)]
        asked: list[int | None] = []
        real = svc.store.executions

        def spy(learner_id: int, limit: int | None = None):
            asked.append(limit)
            return real(learner_id, limit=limit)

        monkeypatch.setattr(svc.store, "executions", spy)
        assert [h["invocation_id"] for h in svc.history("S1", 3)] == ids[-3:]
        assert asked == [3]  # the limit went to SQL; no full read sliced in Python
    finally:
        svc.close()


def test_a_source_tool_without_input_names_takes_the_invocations_arguments(tmp_path, monkeypatch):
    """Before, the service refused any input of such a workflow (it "takes no inputs") and then
    refused the empty body too ("missing input(s)"): it could not be served at all."""
    from agentsched.errors import ToolError

    (tmp_path / "anyin_tools.py").write_text(
        "import agentsched\n\n\nclass Echo(agentsched.Tool):\n    name = 'echo'\n    has_gpu = False\n\n"
        "    def run(self, inputs):\n        return sorted(inputs)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "anyin.yaml").write_text('name: anyin\ntasks:\n  A: {tool: "anyin_tools:Echo"}\nedges: []\n')
    svc = Service(ServiceConfig(workflows=(str(tmp_path / "anyin.yaml"),), store=tmp_path / "s.db",
                                testbed=TestbedSpec(kind="local")))
    try:
        svc.check_inputs("anyin", {"x": 1, "y": 2})
        r = svc.invoke("anyin", {"x": 1, "y": 2})
        assert r.ok and r.outputs == {"A": ["x", "y"]}, r.message
        with pytest.raises(ToolError, match="missing input"):  # it still needs its arguments
            svc.check_inputs("anyin", {})
    finally:
        svc.close()


def test_served_workflow_names_are_unique_and_routable(tmp_path):
    """A name with a '/' was listed but no request could reach it; two files of one name were refused
    without naming the files."""
    import pytest

    from agentsched.errors import WorkflowError
    from agentsched.service.service import workflow_files

    (tmp_path / "a.yaml").write_text("name: same\ntasks: {A: clip}\n")
    (tmp_path / "b.yaml").write_text("name: same\ntasks: {A: clip}\n")
    with pytest.raises(WorkflowError) as e:
        workflow_files((str(tmp_path),))
    assert str(e.value) == (f"two workflows are named same ({tmp_path / 'a.yaml'} and {tmp_path / 'b.yaml'}): "
                            "each served workflow needs its own name")
    (tmp_path / "c.yaml").write_text('name: "a/b"\ntasks: {A: clip}\n')
    with pytest.raises(WorkflowError) as e:
        workflow_files((str(tmp_path / "c.yaml"),))
    assert str(e.value) == (f"workflow 'a/b' ({tmp_path / 'c.yaml'}): a served workflow's name is part of its URL "
                            "and may not hold a '/'")
    assert [w.name for w in workflow_files((str(tmp_path / "a.yaml"), "S1"))] == ["same", "S1"]


def test_a_workflow_the_shared_budget_does_not_narrow_keeps_its_learner(tmp_path, caplog):
    """The budget is part of a learner's key: before, serving S2 beside S13 (1,100 MB) gave S2 a new
    learner under that budget, though all of S2 fits in it, and its history was silently left aside
    (a trial saw a CPU-only workflow's 40 learned invocations vanish when a smaller workflow joined)."""
    store = tmp_path / "s.db"

    def serve(*names: str) -> Service:
        return Service(ServiceConfig(workflows=names, store=store, testbed=TestbedSpec(kind="sim")))

    svc = serve("S2")
    try:
        for _ in range(3):
            assert svc.invoke("S2", {}).ok
        alone = svc.runtimes["S2"].learner_id
    finally:
        svc.close()
    with caplog.at_level("WARNING", logger="agentsched.service"):
        svc = serve("S1", "S2", "S13")
    try:
        assert svc.runtimes["S2"].learner_id == alone and svc.stored_runs["S2"] == 3
        assert svc.runtimes["S2"].workflow.vram_budget_mb is None  # 1,051 MB of GPU tasks fit in 1,100
        assert svc.runtimes["S1"].workflow.vram_budget_mb == 1100  # 3,242 MB do not: narrowed, and said
    finally:
        svc.close()
    said = [r.getMessage() for r in caplog.records if r.name == "agentsched.service"]
    assert any(m.startswith("workflow S1 plans for the shared VRAM budget of 1100 MB (the smallest a served "
                            "workflow declares): it learns apart from its history without a budget") for m in said)
    assert not any("workflow S2 " in m or "workflow S13 " in m for m in said)
