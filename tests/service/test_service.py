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
