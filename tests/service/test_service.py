"""The service in-process (no HTTP): the history view asks the store for the newest N rows, not all."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from agentsched.service import Engine, ServiceConfig  # noqa: E402
from agentsched.service.views import history  # noqa: E402
from agentsched.testbeds.spec import TestbedSpec  # noqa: E402


def test_history_reads_the_newest_n_with_sql_limit(tmp_path, monkeypatch):
    svc = Engine(ServiceConfig(workflows=("S1",), store=tmp_path / "s.db", testbed=TestbedSpec(kind="sim")))
    try:
        ids = [svc.invoke("S1", {}).invocation_id for _ in range(4)]
        asked: list[int | None] = []
        real = svc.store.executions

        def spy(learner_id: int, limit: int | None = None):
            asked.append(limit)
            return real(learner_id, limit=limit)

        monkeypatch.setattr(svc.store, "executions", spy)
        assert [h.invocation_id for h in history(svc, "S1", 3)] == ids[-3:]
        assert asked == [3]  # the limit went to SQL; no full read sliced in Python
    finally:
        svc.close()


def test_a_source_tool_without_input_names_takes_the_invocations_arguments(tmp_path, monkeypatch):
    """Before, the service refused any input of such a workflow (it "takes no inputs") and then
    refused the empty body too ("missing input(s)"): it could not be served at all."""
    from agentsched.errors import ToolError

    (tmp_path / "anyin_tools.py").write_text(
        "import agentsched\n\n\nclass Echo(agentsched.Tool):\n    name = 'echo'\n    has_gpu = False\n\n"
        "    def run(self, inputs):\n        return sorted(inputs)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "anyin.yaml").write_text('name: anyin\ntasks:\n  A: {tool: "anyin_tools:Echo"}\nedges: []\n')
    svc = Engine(
        ServiceConfig(
            workflows=(str(tmp_path / "anyin.yaml"),), store=tmp_path / "s.db", testbed=TestbedSpec(kind="local")
        )
    )
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
    from agentsched.service.discovery import workflow_files

    (tmp_path / "a.yaml").write_text("name: same\ntasks: {A: clip}\n")
    (tmp_path / "b.yaml").write_text("name: same\ntasks: {A: clip}\n")
    with pytest.raises(WorkflowError) as e:
        workflow_files((str(tmp_path),))
    assert str(e.value) == (
        f"two workflows are named same ({tmp_path / 'a.yaml'} and {tmp_path / 'b.yaml'}): "
        "each served workflow needs its own name"
    )
    (tmp_path / "c.yaml").write_text('name: "a/b"\ntasks: {A: clip}\n')
    with pytest.raises(WorkflowError) as e:
        workflow_files((str(tmp_path / "c.yaml"),))
    assert str(e.value) == (
        f"workflow 'a/b' ({tmp_path / 'c.yaml'}): a served workflow's name is part of its URL and may not hold a '/'"
    )
    assert [w.name for w in workflow_files((str(tmp_path / "a.yaml"), "S1"))] == ["same", "S1"]


def test_a_learner_starting_afresh_beside_history_under_another_budget_is_said_once(tmp_path, caplog):
    """The shared budget is part of each learner's key: served beside S13 (1,100 MB), S2 is another
    learner than S2 alone. Before, its history was set aside without a word (a trial saw a workflow's
    40 learned invocations vanish when a smaller workflow joined the service)."""
    store = tmp_path / "s.db"

    def serve(*names: str) -> Engine:
        return Engine(ServiceConfig(workflows=names, store=store, testbed=TestbedSpec(kind="sim")))

    def said() -> list[str]:
        out = [r.getMessage() for r in caplog.records if r.name == "agentsched.service"]
        caplog.clear()
        return out

    caplog.set_level("WARNING", logger="agentsched.service")
    svc = serve("S2", "S1")  # a new store: nothing set aside, nothing said
    for _ in range(3):
        assert svc.invoke("S2", {}).ok
    svc.close()
    assert said() == []
    svc = serve("S2", "S1", "S13")
    try:
        assert svc.runtimes["S2"].workflow.vram_budget_mb == 1100 and svc.stored_runs["S2"] == 0
        assert svc.invoke("S2", {}).ok
    finally:
        svc.close()
    [line] = said()  # S2 only: S1's learner under no budget had no invocation; S13 keeps its own
    assert line == (
        "workflow S2 starts learning afresh under a VRAM budget of 1100 MB: the store holds 3 "
        "invocations of it learned under no VRAM budget (learner 1), set aside (a learner's key holds "
        "its budget, here the smallest a served workflow declares: serve the same workflows together "
        "to resume them)"
    )
    svc = serve("S2", "S13")  # a restart on the same set resumes its learner: nothing to say
    svc.close()
    assert said() == []
