"""The run journal: each finished run is recorded as it completes; --resume continues an interrupted
bench (killed with SIGKILL at random moments) and its results equal an uninterrupted run's."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentsched.errors import AgentschedError
from agentsched.experiments.journal import JOURNAL_NAME, RunJournal, journaled

# 45 runs, each long enough (tens of ms) that a kill can land between two of them, and enough of them
# that three kills after at most 5 more finished runs each leave some unfinished
BENCH = [
    "bench",
    "--scenarios",
    "S1,S5,S13",
    "--policies",
    "heft,ucb1,agent-rules",
    "--seeds",
    "5",
    "--rounds",
    "40",
    "--repeats",
    "5",
    "--no-ablation",
]
RUNS = 45


def _bench(out: Path, *extra: str, capture: bool = False, log: Path | None = None) -> subprocess.Popen:
    # an unread pipe could fill and stall the child: runs that get killed write to ``log`` instead
    sink = subprocess.PIPE if capture else (open(log, "a") if log else subprocess.DEVNULL)  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "agentsched", *BENCH, "--out", str(out), *extra],
        stdout=sink,
        stderr=subprocess.STDOUT if not capture else sink,
        text=True,
    )


def _comparable(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())
    doc.pop("wall_s")
    doc["notes"] = [n for n in doc["notes"] if not n.startswith("resumed:")]
    return doc


def _runs_recorded(out: Path) -> int:
    try:
        # read-only: connecting must never create the file the bench is about to create
        with sqlite3.connect(f"file:{out / JOURNAL_NAME}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_a_bench_killed_at_random_moments_resumes_to_the_same_results(tmp_path):
    whole = tmp_path / "whole"
    p = _bench(whole, capture=True)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    expected = _comparable(whole)

    broken = tmp_path / "broken"
    rng = random.Random(7)
    kills = 0
    first = True
    for _ in range(3):  # kill a few times at random moments, each time after some progress
        before = _runs_recorded(broken)
        p = _bench(broken, *([] if first else ["--resume"]), log=tmp_path / "attempts.log")
        first = False
        target = before + rng.randint(1, 5)  # a random moment: after 1-5 more finished runs
        deadline = time.monotonic() + 120
        while _runs_recorded(broken) < target and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait(timeout=60)
    why = (tmp_path / "attempts.log").read_text()[-2000:]
    assert kills == 3 and not (broken / "results.json").exists() and _runs_recorded(broken) < RUNS, why
    p = _bench(broken, "--resume", capture=True)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "resumed:" in out
    assert _comparable(broken) == expected


def test_resume_refuses_a_journal_of_another_experiment(tmp_path):
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.put("k", {"x": 1})
    j.close()
    with pytest.raises(AgentschedError, match="belongs to a different experiment"):
        RunJournal(tmp_path / "j.sqlite", {"a": 2}, resume=True)
    again = RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)
    assert again.get("k") == {"x": 1} and len(again) == 1
    again.close()


def test_without_resume_an_old_journal_is_replaced(tmp_path):
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.put("k", 1)
    j.close()
    fresh = RunJournal(tmp_path / "j.sqlite", {"a": 2})
    assert fresh.get("k") is None and len(fresh) == 0
    fresh.close()


def test_a_corrupt_journal_is_a_one_line_error(tmp_path):
    bad = tmp_path / "j.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(AgentschedError, match="unusable"):
        RunJournal(bad, {"a": 1}, resume=True)


def test_journaled_computes_once(tmp_path):
    j = RunJournal(tmp_path / "j.sqlite", {})
    calls = []
    assert journaled(j, "k", lambda: calls.append(1) or 5) == 5
    assert journaled(j, "k", lambda: calls.append(1) or 6) == 5
    assert calls == [1] and j.resumed == 1
    assert journaled(None, "k", lambda: 7) == 7
    j.close()


def test_ablation_resume_needs_a_journal(cli):
    code, _, err = cli("ablation", "S13", "--resume", "--seeds", "1", "--rounds", "1")
    assert (
        code == 2
        and err.strip() == "error: --resume needs --journal FILE (where the interrupted ablation recorded its runs)"
    )


def test_ablation_journal_resumes(cli, tmp_path):
    args = (
        "ablation",
        "S13",
        "--seeds",
        "2",
        "--rounds",
        "3",
        "--repeats",
        "1",
        "--initial",
        "rules",
        "--journal",
        str(tmp_path / "a.sqlite"),
    )
    code, first, err = cli(*args)
    assert code == 0, err
    code, second, err = cli(*args, "--resume")
    assert code == 0, err
    assert "resumed: 10 finished runs" in err and second == first  # 5 variants x 2 seeds; the note on stderr
    code, doc, err = cli(*args, "--resume", "--json")
    assert code == 0 and json.loads(doc)  # (before, the note came first on stdout: not JSON)
    code, third, err = cli(*args)  # it finished: run again without --resume, it starts over
    assert code == 0 and third == first, err


def test_without_resume_an_interrupted_journal_of_the_same_experiment_is_refused(tmp_path):
    """(A re-run that forgot --resume wiped the 109 runs of an interrupted bench.)"""
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.put("k", 1)
    j.close()
    with pytest.raises(
        AgentschedError,
        match=r"holds 1 finished runs of this experiment, which did not finish: "
        r"add --resume to continue it, or remove the file to start again$",
    ):
        RunJournal(tmp_path / "j.sqlite", {"a": 1})
    again = RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)
    assert again.get("k") == 1
    again.finish()
    again.close()
    fresh = RunJournal(tmp_path / "j.sqlite", {"a": 1})  # finished: a new run starts over
    assert len(fresh) == 0
    fresh.put("k", 1)
    fresh.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:  # a journal of before the end was marked
        db.execute("DELETE FROM meta WHERE key = 'marks_end'")
    older = RunJournal(tmp_path / "j.sqlite", {"a": 1})  # cannot say it did not finish: replaced, as before
    assert len(older) == 0
    older.close()


@pytest.mark.parametrize("content", [b"my precious notes\n", None])
def test_a_file_that_is_not_a_journal_is_never_replaced(tmp_path, content):
    f = tmp_path / "notes.db"
    if content is None:  # another SQLite database (e.g. a runtime store)
        with sqlite3.connect(f) as db:
            db.execute("CREATE TABLE executions (id INTEGER)")
        before = f.read_bytes()
    else:
        f.write_bytes(content)
        before = content
    with pytest.raises(AgentschedError, match="exists and is not a run journal"):
        RunJournal(f, {"a": 1})
    assert f.read_bytes() == before


def test_ctrl_c_is_exit_130_with_one_line(cli, monkeypatch):
    import agentsched.loop.runner as runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_loop", interrupted)
    code, out, err = cli("run", "S5", "-p", "heft", "--rounds", "1", "--no-oracle")
    assert code == 130 and err.splitlines()[-1] == "error: interrupted"


class _RunsCodeWhenUnpickled:
    """What an attacker would put in a journal row: unpickling it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def _ablation_args(journal: Path) -> tuple[str, ...]:
    return (
        "ablation",
        "S13",
        "--seeds",
        "1",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--initial",
        "rules",
        "--journal",
        str(journal),
    )


def _overwrite_rows(journal: Path, payload) -> None:
    """Every row replaced by ``payload``: text is compressed as the journal writes rows, bytes go as given."""
    import zlib

    if isinstance(payload, str):
        payload = zlib.compress(payload.encode())
    with sqlite3.connect(journal) as db:
        db.execute("UPDATE runs SET payload = ?", (payload,))


def test_a_journal_row_that_would_run_code_is_refused_and_runs_nothing(cli, tmp_path):
    import pickle
    import zlib

    journal, marker = tmp_path / "a.sqlite", tmp_path / "pwned"
    code, _, err = cli(*_ablation_args(journal))
    assert code == 0, err
    _overwrite_rows(journal, zlib.compress(pickle.dumps(_RunsCodeWhenUnpickled(marker))))
    code, out, err = cli(*_ablation_args(journal), "--resume")
    assert not marker.exists()
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert f"run journal {journal}: run ablation|S13|" in err and "is unreadable (not a JSON record" in err


def test_rows_are_json_data_and_survive_a_round_trip(tmp_path):
    from agentsched.experiments.bench import BenchConfig, BenchRecord, run_bench

    res = run_bench(BenchConfig(scenarios=("S5",), policies=("heft", "agent-rules"), seeds=(0,), rounds=3, repeats=2))
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    for i, r in enumerate(res.records):
        j.put(str(i), r)
    j.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        rows = [row[0] for row in db.execute("SELECT payload FROM runs")]
    import zlib

    from agentsched.experiments.journal_codec import encode

    texts = [zlib.decompress(row) for row in rows]
    assert all(isinstance(json.loads(text), dict) for text in texts)  # JSON text, compressed; no pickle
    # compressed: the default bench's journal took 54 MB of plain JSON
    assert sum(map(len, rows)) * 5 < sum(len(encode(r)) for r in res.records)
    again = RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)
    assert [again.get(str(i), BenchRecord, res.workflows) for i in range(len(rows))] == res.records
    again.close()


@pytest.mark.parametrize(
    "row, problem",
    [
        ('{"$rec": "Popen", "fields": {"args": "touch x"}}', "unknown record type 'Popen'"),
        ('{"$rec": "RunMetrics", "fields": {"tasks": "seven"}}', "RunMetrics.tasks is a str, not <class 'int'>"),
        ('{"$tuple": [1, 2, 3]}', "holds a tuple, not the expected"),
        ("[" * 100000 + "]" * 100000, "not a JSON record (RecursionError)"),
        ('{"$dict": [[1]]}', "not a [key, value] pair"),
        ('{"$workflow": "S99"}', "names workflow 'S99'"),
    ],
)
def test_a_wrong_typed_journal_row_is_one_line_naming_the_file_and_the_run(tmp_path, row, problem):
    from agentsched.loop.metrics import RunMetrics

    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.put("k", 1)
    j.close()
    _overwrite_rows(tmp_path / "j.sqlite", row)
    again = RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)
    with pytest.raises(AgentschedError) as e:
        again.get("k", tuple[str, RunMetrics, str | None])
    again.close()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"run journal {tmp_path / 'j.sqlite'}: run k is unreadable")
    assert problem in msg


@pytest.mark.parametrize(
    "payload, problem",
    [
        (b"not zlib", "is not a compressed record"),
        (__import__("zlib").compress(b" " * (300 << 20)), "decompresses past 256 MiB"),
        ("plain text", "holds a str, not a compressed JSON record"),
    ],
)
def test_a_row_that_is_not_a_bounded_compressed_record_is_one_line(tmp_path, payload, problem):
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.put("k", 1)
    j.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        db.execute("UPDATE runs SET payload = ?", (payload,))
    again = RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)
    with pytest.raises(AgentschedError, match=f"run k is unreadable \\({problem}\\)"):
        again.get("k")
    again.close()


def test_a_journal_of_the_pickle_format_is_refused_in_one_line(tmp_path):
    j = RunJournal(tmp_path / "j.sqlite", {"a": 1})
    j.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:  # what earlier versions wrote: no row format
        db.execute("DELETE FROM meta WHERE key = 'format'")
    with pytest.raises(
        AgentschedError,
        match=r"holds rows in another format \(pickle, this is json-zlib-2\): "
        "it cannot be resumed; run without --resume",
    ):
        RunJournal(tmp_path / "j.sqlite", {"a": 1}, resume=True)


def _fail_to_write(*_args, **_kwargs):
    raise AgentschedError("cannot write the outputs (disk full)")


def test_a_bench_whose_outputs_failed_to_write_stays_resumable(cli, tmp_path, monkeypatch):
    """The end is marked after the outputs: a bench whose files could not be written (a full disk) is
    refused without --resume and resumed with it, not started over."""
    import agentsched.report.outputs as outputs

    args = (
        "bench",
        "--scenarios",
        "S1",
        "--policies",
        "heft,ucb1",
        "--seeds",
        "2",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--no-ablation",
        "--out",
        str(tmp_path / "b"),
    )
    write = outputs.write_outputs
    monkeypatch.setattr(outputs, "write_outputs", _fail_to_write)
    code, _, err = cli(*args)
    assert code != 0 and "disk full" in err
    monkeypatch.setattr(outputs, "write_outputs", write)
    code, _, err = cli(*args)
    assert code != 0 and "which did not finish: add --resume" in err
    code, out, err = cli(*args, "--resume")
    assert code == 0 and "resumed: 4 finished runs" in out, err
    assert (tmp_path / "b" / "results.json").is_file()


def test_an_ablation_whose_output_failed_to_write_stays_resumable(cli, tmp_path, monkeypatch):
    import agentsched.cli.agent_cmds as agent_cmds

    args = (
        "ablation",
        "S13",
        "--seeds",
        "1",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--initial",
        "rules",
        "--journal",
        str(tmp_path / "a.sqlite"),
    )
    monkeypatch.setattr(agent_cmds, "emit", _fail_to_write)
    code, _, err = cli(*args)
    assert code != 0 and "disk full" in err
    monkeypatch.undo()
    code, _, err = cli(*args)
    assert code != 0 and "which did not finish: add --resume" in err
    code, _, err = cli(*args, "--resume")
    assert code == 0 and "resumed: 5 finished runs" in err
