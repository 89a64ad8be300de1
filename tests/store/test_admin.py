"""Looking after a store: summaries, naming a learner, export read back, vacuum, newest-N reads, and
store paths with URI characters in them."""

from __future__ import annotations

import json
import os

import pytest

from agentsched.errors import StoreError
from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.store import Store, execution_from_doc
from agentsched.store.admin import UnknownLearnerError, file_bytes, find, find_one, summaries
from agentsched.store.export import read_export, write_export


def _x(e2e: float, status: Status = Status.OK) -> Execution:
    return Execution(
        status=status,
        mapping={"A": Mode.CPU},
        e2e_ms=e2e if status is Status.OK else None,
        elapsed_ms=e2e,
        peak_vram_mb=0.0,
        spans=(),
        message="" if status is Status.OK else "boom",
        testbed="sim",
    )


@pytest.fixture
def filled(tmp_path):
    """A store with S1 learned under two policies and S2 under one."""
    st = Store(tmp_path / "s.db")
    s1a = st.learner(load_scenario("S1"), "agent-rules", {"round_size": 2})
    s1b = st.learner(load_scenario("S1"), "ucb1", {"round_size": 2})
    s2 = st.learner(load_scenario("S2"), "agent-rules", {"round_size": 2})
    for i, e2e in enumerate((30.0, 20.0, 25.0)):
        st.append(s1a.id, i, "round", 0, _x(e2e))
    st.add_round(s1a.id, 0, {"A": Mode.CPU}, Status.OK, 21.5, 2, "start")
    st.add_round(s1a.id, 1, {"A": Mode.GPU_NOW}, Status.OK, 9.5, 3, "better")
    st.add_round(s1a.id, 2, {"A": Mode.GPU_QUEUE}, Status.OOM, None, 4, "too big")
    st.append(s2.id, 0, "round", 0, _x(0.0, Status.ERROR))
    yield st, s1a, s1b, s2
    st.close()


def test_summaries_count_each_learner_and_name_its_best_ok_round(filled):
    st, s1a, s1b, s2 = filled
    rows = {r["learner"]: r for r in summaries(st)}
    assert [r["workflow"] for r in rows.values()] == ["S1", "S1", "S2"]
    assert rows[s1a.id]["invocations"] == 3 and rows[s1a.id]["key"] == s1a.key
    assert rows[s1a.id]["best_mapping"] == {"A": "gpu_now"} and rows[s1a.id]["best_e2e_ms"] == 9.5
    assert rows[s1b.id]["invocations"] == 0 and rows[s1b.id]["last_s"] is None
    assert rows[s2.id]["best_mapping"] is None and rows[s2.id]["last_s"] > 0


def test_a_learner_is_named_by_workflow_key_prefix_or_id(filled):
    st, s1a, s1b, s2 = filled
    assert find_one(st, "S2") == s2
    assert find_one(st, s1b.key) == s1b and find_one(st, s1b.key[:6]) == s1b
    assert find_one(st, f"#{s1a.id}") == s1a
    assert find(st, "S1") == [s1a, s1b]
    with pytest.raises(UnknownLearnerError, match=r"'S1' names 2 learners .*: give one key"):
        find_one(st, "S1")  # one command never drops more history than was named
    with pytest.raises(UnknownLearnerError, match=r"has no learner 'S9' \(workflows: S1, S2;"):
        find_one(st, "S9")
    with pytest.raises(UnknownLearnerError):
        find_one(st, s1a.key[:3])  # too short a prefix to be a key


def test_export_holds_every_record_and_reads_back(filled, tmp_path):
    st, s1a, _, _ = filled
    out = tmp_path / "e.json"
    assert write_export(st, s1a, out) == (3, 3)
    doc = read_export(out)
    assert doc["learner"]["key"] == s1a.key and doc["workflow"]["name"] == "S1"
    assert [r["round"] for r in doc["rounds"]] == [0, 1, 2] and doc["best"]["best_e2e_ms"] == 9.5
    assert [e["seq"] for e in doc["executions"]] == [0, 1, 2]
    back = [execution_from_doc(e["record"]) for e in doc["executions"]]
    assert [x.e2e_ms for x in back] == [30.0, 20.0, 25.0] and back[0].mapping == {"A": Mode.CPU}
    assert not list(tmp_path.glob(".e.json.*"))  # no temporary file left
    assert read_export(str(out)) == doc  # a text path too
    (tmp_path / "x.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(StoreError, match="not an agentsched learner export"):
        read_export(tmp_path / "x.json")


def test_executions_limit_reads_the_newest_n_oldest_first(filled):
    st, s1a, _, _ = filled
    every = st.executions(s1a.id)
    assert [r.id for r in st.executions(s1a.id, limit=2)] == [r.id for r in every[-2:]]
    assert [r.id for r in st.executions(s1a.id, limit=10)] == [r.id for r in every]


def test_vacuum_shrinks_a_store_after_forget_and_keeps_the_rest(tmp_path):
    st = Store(tmp_path / "v.db")
    big = st.learner(load_scenario("S1"), "agent-rules", {})
    keep = st.learner(load_scenario("S2"), "agent-rules", {})
    for i in range(300):
        st.append(
            big.id,
            i,
            "round",
            0,
            Execution(
                status=Status.ERROR,
                mapping={"A": Mode.CPU},
                e2e_ms=None,
                elapsed_ms=1.0,
                peak_vram_mb=0.0,
                spans=(),
                message="x" * 500,
            ),
        )
    st.append(keep.id, 0, "round", 0, _x(5.0))
    st.forget(big.id)
    st._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # what a later open would do: the pages are free now
    before = file_bytes(st.path)
    st.vacuum()
    after = file_bytes(st.path)
    assert after < before
    assert [r.e2e_ms for r in st.executions(keep.id)] == [5.0]
    st.close()


def test_vacuum_on_a_read_only_store_is_one_line(filled):
    st, *_ = filled
    ro = Store(st.path, read_only=True)
    with pytest.raises(StoreError, match="was opened read-only"):
        ro.vacuum()
    ro.close()


@pytest.mark.parametrize("name", ["a?b.db", "c#d.db", "e%3Ff.db", "g h?mode=ro.db"])
def test_a_store_path_with_uri_characters_opens_that_very_file(tmp_path, name):
    path = tmp_path / name
    st = Store(path)
    st.learner(load_scenario("S1"), "agent-rules", {})
    st.close()
    assert path.is_file() and sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [
        name
    ]  # no other file created under a truncated name
    ro = Store(path, read_only=True)
    assert [ln.workflow_name for ln in ro.learners()] == ["S1"]
    ro.close()
    if os.name == "posix":  # read-only folder: the immutable URI is escaped the same way
        os.chmod(tmp_path, 0o555)
        try:
            ro = Store(path, read_only=True)
            assert len(ro.learners()) == 1
            ro.close()
        finally:
            os.chmod(tmp_path, 0o755)
