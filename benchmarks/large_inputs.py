"""Large workflows through the CLI: `show`, `oracle` (its refusal) and round 0 of `run` on a generated
DAG of N tasks (default 5,000), the YAML parser (C loader vs pure Python), and how fast an input over
the caps is refused. Figures are printed, measured side by side in one run; nothing is asserted.

    python benchmarks/large_inputs.py [--tasks 5000] [--policies all-gpu,heft,agent-rules]
    python benchmarks/large_inputs.py --memory --tasks 10000 [--rounds 20 --repeats 5] [--policies ...]
    python benchmarks/large_inputs.py --memory --tasks 2500,5000,10000   # and the MB per 1,000 tasks

Target (issue 13): each command on 5,000 tasks within a few seconds.
Target (issue 20): peak memory of `run` at 10,000 tasks <= 500 MB for every policy (or a clean refusal),
growing linearly with the tasks (with several --tasks sizes, the slope per policy is printed), and a
YAML over the caps refused from its shape before it is built (seconds and MB, not minutes and GB).
agent-plan refuses workflows over 5,000 tasks in one line (exit 2), which the table shows as such.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from agentsched.cli.main import main as cli_main
from agentsched.model.workflow import MAX_EDGES, MAX_TASKS
from agentsched.model.workflow_io import load_yaml

TOOLS = ("ocr", "whisper_base", "vector_search", "image_resize", "clip", "groupby")
TARGET_S = 5.0  # "a few seconds"
TARGET_MB = 500.0  # peak memory of one command on 10,000 tasks
# one CLI command in a child process; prints its exit code and peak RSS (ru_maxrss is KiB on Linux)
_CHILD = (
    "import resource, sys\nfrom agentsched.cli.main import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
    "except SystemExit as e:\n    code = e.code if isinstance(e.code, int) else 1\n"
    "print('@@', code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


def make_workflow(n_tasks: int, rng: random.Random) -> dict:
    """A layered random DAG: each task depends on up to two of the 50 tasks before it."""
    tasks = {f"T{i}": {"tool": rng.choice(TOOLS)} for i in range(n_tasks)}
    edges: dict[tuple[str, str], None] = {}
    for i in range(1, n_tasks):
        for _ in range(2):
            j = rng.randrange(max(0, i - 50), i)
            edges[(f"T{j}", f"T{i}")] = None
    return {"name": f"large{n_tasks}", "decision_space": "binary", "tasks": tasks, "edges": [list(e) for e in edges]}


def timed_cli(*argv: str) -> tuple[float, int, str]:
    """Seconds, exit code and last stderr line of one in-process CLI call (stdout discarded)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    last = (err.getvalue().strip().splitlines() or [""])[-1]
    return time.perf_counter() - t0, code, last


def peak_cli(*argv: str, timeout_s: float) -> tuple[float, int | None, float | None, str]:
    """Seconds, exit code, peak RSS (MB) and last stderr line of one CLI command in its own process
    (code None: timed out)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, None, None, ""
    lines = p.stderr.strip().splitlines()
    mark = [line.split() for line in lines if line.startswith("@@")]
    last = ([line for line in lines if not line.startswith("@@")] or [""])[-1]
    if not mark:
        return time.perf_counter() - t0, p.returncode, None, last
    return time.perf_counter() - t0, int(mark[-1][1]), int(mark[-1][2]) / 1024, last


def memory_table(path: Path, policies: list[str], rounds: int, repeats: int, timeout_s: float) -> dict[str, float]:
    """Peak memory of `run` per policy (and of `show`), each in a fresh process: {label: MB} of the
    commands that finished with exit 0."""
    print(f"{'command':36s} {'seconds':>8s} {'peak MB':>8s} {'x target':>9s}  result")
    rows = [("show", ("show", str(path)))]
    rows += [
        (
            f"run {p} ({rounds}x{repeats})",
            ("run", str(path), "-p", p, "--rounds", str(rounds), "--repeats", str(repeats), "--no-oracle"),
        )
        for p in policies
    ]
    peaks: dict[str, float] = {}
    for label, argv in rows:
        s, code, mb, last = peak_cli(*argv, timeout_s=timeout_s)
        if code is None:
            print(f"{label:36s} {s:8.1f} {'-':>8s} {'-':>9s}  timed out after {timeout_s:g} s")
            continue
        shown = "-" if mb is None else f"{mb:8.0f}"
        ratio = "-" if mb is None else f"{mb / TARGET_MB:9.2f}"
        print(f"{label:36s} {s:8.1f} {shown:>8s} {ratio:>9s}  exit {code}" + (f": {last[:90]}" if code else ""))
        if code == 0 and mb is not None:
            peaks[label] = mb
    return peaks


def slope_table(peaks: dict[int, dict[str, float]]) -> None:
    """Peak MB per 1,000 tasks between the smallest and the largest size, per command; linear memory
    shows as a slope that the middle size confirms (its peak near the straight line)."""
    sizes = sorted(peaks)
    lo, hi = sizes[0], sizes[-1]
    print(f"\npeak MB by tasks ({', '.join(f'{n:,}' for n in sizes)}) and slope (MB per 1,000 tasks)")
    for label in peaks[hi]:
        if not all(label in peaks[n] for n in sizes):
            continue
        slope = (peaks[hi][label] - peaks[lo][label]) / (hi - lo) * 1000
        line = " ".join(f"{peaks[n][label]:7.0f}" for n in sizes)
        mids = [n for n in sizes if lo < n < hi]
        off = ""
        if mids:  # the middle size against the straight line through the ends
            n = mids[0]
            fit = peaks[lo][label] + slope * (n - lo) / 1000
            off = f"  {n:,} tasks: {peaks[n][label] / fit:.2f}x the line"
        print(f"{label:36s} {line}  slope {slope:6.1f}{off}")


def parse_seconds(text: str, loader: type) -> float:
    t0 = time.perf_counter()
    yaml.load(text, Loader=loader)  # noqa: S506 - safe loaders only
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--tasks",
        default="5000",
        help="tasks of the generated workflow; with --memory a comma list "
        "(e.g. 2500,5000,10000) measures each size and prints the slope",
    )
    ap.add_argument("--policies", default="all-gpu,heft,agent-rules")
    ap.add_argument("--memory", action="store_true", help="peak memory of each command in its own process")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per command, with --memory")
    a = ap.parse_args()
    sizes = [int(n) for n in a.tasks.split(",")]
    if len(sizes) > 1 and not a.memory:
        ap.error("several --tasks sizes need --memory")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.yaml"
        peaks: dict[int, dict[str, float]] = {}
        for n_tasks in sizes:
            doc = make_workflow(n_tasks, random.Random(0))
            text = yaml.safe_dump(doc)
            path.write_text(text)
            print(
                f"workflow: {n_tasks:,} tasks, {len(doc['edges']):,} edges, {len(text) / 2**20:.2f} MiB YAML "
                f"(caps: {MAX_TASKS:,} tasks, {MAX_EDGES:,} edges)"
            )
            if a.memory:
                peaks[n_tasks] = memory_table(path, a.policies.split(","), a.rounds, a.repeats, a.timeout_s)
        if a.memory:
            if len(sizes) > 1:
                slope_table(peaks)
            over = Path(tmp) / "over.yaml"  # 15.5 MB of tasks: 650,000, far over the task cap
            with over.open("w") as f:
                f.write("name: over\ntasks:\n")
                f.writelines(f"  T{i}: {{tool: clip}}\n" for i in range(650_000))
            s, code, mb, _ = peak_cli("show", str(over), timeout_s=a.timeout_s)
            print(f"{'refuse a 15.5 MB YAML of 650k tasks':36s} {s:8.1f} {mb or 0:8.0f} {'':9s}  exit {code}")
            return
        print(f"{'step':36s} {'seconds':>8s} {'x target':>9s}  result")
        rows = [("show", ("show", str(path)))]
        rows.append(("oracle (refusal)", ("oracle", str(path))))
        for p in a.policies.split(","):
            rows.append((f"run round 0, {p}", ("run", str(path), "-p", p, "--rounds", "1", "--repeats", "1")))
        for label, argv in rows:
            s, code, last = timed_cli(*argv)
            print(f"{label:36s} {s:8.2f} {s / TARGET_S:9.2f}  exit {code}" + (f": {last[:70]}" if code else ""))

        c_loader = getattr(yaml, "CSafeLoader", None)
        py_s = parse_seconds(text, yaml.SafeLoader)
        print(f"{'YAML parse, pure-Python SafeLoader':36s} {py_s:8.2f}")
        if c_loader is not None:
            c_s = parse_seconds(text, c_loader)
            print(f"{'YAML parse, CSafeLoader':36s} {c_s:8.2f}  {py_s / c_s:.1f}x faster")
        t0 = time.perf_counter()
        load_yaml(text)
        print(f"{'YAML parse, agentsched load_yaml':36s} {time.perf_counter() - t0:8.2f}  (duplicate-key checks)")

        # 2M aliased edges in a few MB: refused while constructing, before any edge is built
        n_alias = 2_000_000
        bomb = Path(tmp) / "aliases.yaml"
        bomb.write_text(
            "name: bomb\ntasks: {A: clip, B: clip}\nedge: &e [A, B]\nedges: [" + ", ".join(["*e"] * n_alias) + "]\n"
        )
        s, code, last = timed_cli("show", str(bomb))
        print(f"{'refuse 2M aliased edges':36s} {s:8.2f} {s / TARGET_S:9.2f}  exit {code}: {last[:70]}")


if __name__ == "__main__":
    main()
