"""One bench per output folder: a second bench on the same --out is refused in one line while the
first runs (and leaves its journal alone); the lock dies with its process."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from agentsched.experiments.folder_lock import LOCK_NAME
from agentsched.experiments.journal import JOURNAL_NAME

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


def _bench(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "agentsched", *BENCH, "--out", str(out), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs_recorded(out: Path) -> int:
    try:
        with sqlite3.connect(f"file:{out / JOURNAL_NAME}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.Error:
        return 0


def _wait_for_runs(out: Path, p: subprocess.Popen, n: int) -> None:
    deadline = time.monotonic() + 120
    while _runs_recorded(out) < n and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_second_bench_on_a_running_benchs_out_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    first = _bench(out)
    try:
        _wait_for_runs(out, first, 2)
        assert first.poll() is None, "the first bench ended before the second could start"
        second = _bench(out)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2
        assert err.strip() == (
            f"error: --out {out} is in use by another running bench or load study (pid {first.pid}); "
            "wait for it to end or choose another folder"
        )
        assert first.poll() is None and _runs_recorded(out) >= 2  # the running bench's journal is untouched
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
        assert _runs_recorded(out) == 45 and (out / "results.json").exists()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_the_lock_of_a_killed_bench_is_not_stale(tmp_path):
    out = tmp_path / "out"
    first = _bench(out)
    _wait_for_runs(out, first, 1)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert (out / LOCK_NAME).exists()  # left behind, and yet no obstacle
    again = _bench(out, "--resume")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err


def test_a_released_folder_keeps_no_lock_file_and_can_be_held_again(tmp_path):
    from agentsched.experiments.folder_lock import FolderLock, hold_folder, release_folder

    hold_folder(tmp_path)
    assert (tmp_path / LOCK_NAME).read_text() == f"{__import__('os').getpid()}\n"
    release_folder(tmp_path)
    assert not (tmp_path / LOCK_NAME).exists()
    again = FolderLock(tmp_path)  # the name is free: a new holder takes it
    assert (tmp_path / LOCK_NAME).exists()
    again.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_bench_that_ends_leaves_no_lock_file(cli, tmp_path):
    out = tmp_path / "out"
    code, _, err = cli(
        "bench",
        "--scenarios",
        "S5",
        "--policies",
        "heft",
        "--seeds",
        "1",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--no-ablation",
        "--out",
        str(out),
    )
    assert code == 0, err
    assert (out / "results.json").exists() and not (out / LOCK_NAME).exists()
