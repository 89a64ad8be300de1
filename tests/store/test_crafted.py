"""A store made or changed by something else than agentsched: objects it never creates refused at open,
a read that would run forever stopped, an export of a huge row streamed, and the export's temporary file
created exclusively (issue 48, items 5 and 6)."""

from __future__ import annotations

import json
import os
import sqlite3
import tracemalloc

import pytest

from agentsched.errors import StoreError
from agentsched.model.execution import Execution, Status
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario
from agentsched.store import Store, execution_from_doc
from agentsched.store.export import read_export, write_export

RECURSIVE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r"


def _x(e2e: float) -> Execution:
    return Execution(
        status=Status.OK, mapping={"A": Mode.CPU}, e2e_ms=e2e, elapsed_ms=e2e, peak_vram_mb=0.0, spans=(), message=""
    )


@pytest.fixture
def stored(tmp_path):
    path = tmp_path / "s.db"
    st = Store(path)
    ln = st.learner(load_scenario("S1"), "agent-rules", {})
    st.append(ln.id, 0, "round", 0, _x(3.0))
    st.close()
    return path


def _craft(path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in statements:
        conn.execute(sql)
    conn.close()


@pytest.mark.parametrize("read_only", [True, False])
@pytest.mark.parametrize(
    "sql, named",
    [
        (
            "CREATE TRIGGER eat AFTER INSERT ON executions BEGIN DELETE FROM executions WHERE id = NEW.id; END",
            "trigger 'eat'",
        ),
        (f"CREATE VIEW forever AS {RECURSIVE}", "view 'forever'"),
    ],
)
def test_a_trigger_or_a_view_is_refused_at_open_in_one_line(stored, sql, named, read_only):
    _craft(stored, sql)
    with pytest.raises(StoreError) as e:
        Store(stored, read_only=read_only)
    text = str(e.value)
    assert "\n" not in text and named in text and "never creates" in text


def test_a_table_replaced_by_a_recursive_view_is_refused(stored):
    _craft(stored, "DROP TABLE rounds", f"CREATE VIEW rounds AS SELECT 1 AS learner_id, x AS round FROM ({RECURSIVE})")
    with pytest.raises(StoreError, match="view 'rounds'"):
        Store(stored, read_only=True)


def test_a_read_past_the_query_limit_is_stopped_in_one_line(stored):
    st = Store(stored, read_only=True, query_limit_s=0.2)
    with pytest.raises(StoreError, match=r"took more than 0.2 s to answer one read: stopped"):
        st._read(f"SELECT COUNT(*) FROM ({RECURSIVE})")
    assert [ln.workflow_name for ln in st.learners()] == ["S1"]  # the next read runs as ever
    st.close()


def test_an_export_does_not_follow_a_link_planted_at_its_temporary_name(stored, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "e.json"
    for name in (f".{out.name}.{os.getpid()}.tmp", f".{out.name}.tmp"):  # the names an export could guess
        (tmp_path / name).symlink_to(victim)
    st = Store(stored, read_only=True)
    write_export(st, st.learners()[0], out)
    st.close()
    assert victim.read_text() == "keep me" and read_export(out)["learner"]["workflow_name"] == "S1"
    assert not out.is_symlink()


def _huge_row(path, *, record_mb: int = 0, message_mb: int = 0) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    (record,) = conn.execute("SELECT record FROM executions").fetchone()
    doc = json.loads(record)
    if record_mb:
        doc["pad"] = "r" * (record_mb << 20)
    conn.execute("UPDATE executions SET record = ?, message = ?", (json.dumps(doc), "m\u00e9" * (message_mb << 19)))
    conn.close()


@pytest.mark.parametrize("record_mb, message_mb", [(40, 0), (0, 40)])
def test_an_export_of_a_huge_row_is_streamed_in_bounded_memory(stored, tmp_path, record_mb, message_mb):
    _huge_row(stored, record_mb=record_mb, message_mb=message_mb)
    st = Store(stored, read_only=True)
    out = tmp_path / "e.json"
    tracemalloc.start()
    try:
        assert write_export(st, st.learners()[0], out) == (1, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        st.close()
    assert peak < 12 << 20, f"peak {peak / 2**20:.1f} MiB"  # a 40 MiB row, never held whole
    (back,) = read_export(out)["executions"]
    assert execution_from_doc(back["record"]).e2e_ms == 3.0
    assert len(back["record"].get("pad", "")) == record_mb << 20 and len(back["message"]) == message_mb << 20


def test_a_huge_record_that_is_not_an_object_is_one_line(stored, tmp_path):
    conn = sqlite3.connect(stored, isolation_level=None)
    conn.execute("UPDATE executions SET record = ?", ("[" + "1," * (5 << 20) + "1]",))
    conn.close()
    st = Store(stored, read_only=True)
    with pytest.raises(StoreError, match="execution 1 is not a JSON object"):
        write_export(st, st.learners()[0], tmp_path / "e.json")
    st.close()
    assert not list(tmp_path.glob("*.json*"))  # nothing written, no temporary file left
