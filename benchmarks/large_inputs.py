"""Large workflows through the CLI: `show`, `oracle` (its refusal) and round 0 of `run` on a generated
DAG of N tasks (default 5,000), the YAML parser (C loader vs pure Python), and how fast an input over
the caps is refused. Figures are printed, measured side by side in one run; nothing is asserted.

    python benchmarks/large_inputs.py [--tasks 5000] [--policies all-gpu,heft,agent-rules]

Target (issue 13): each command on 5,000 tasks within a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import tempfile
import time
from pathlib import Path

import yaml

from agentsched.cli.main import main as cli_main
from agentsched.model.workflow import MAX_EDGES, MAX_TASKS, load_yaml

TOOLS = ("ocr", "whisper_base", "vector_search", "image_resize", "clip", "groupby")
TARGET_S = 5.0  # "a few seconds"


def make_workflow(n_tasks: int, rng: random.Random) -> dict:
    """A layered random DAG: each task depends on up to two of the 50 tasks before it."""
    tasks = {f"T{i}": {"tool": rng.choice(TOOLS)} for i in range(n_tasks)}
    edges: dict[tuple[str, str], None] = {}
    for i in range(1, n_tasks):
        for _ in range(2):
            j = rng.randrange(max(0, i - 50), i)
            edges[(f"T{j}", f"T{i}")] = None
    return {"name": f"large{n_tasks}", "decision_space": "binary", "tasks": tasks,
            "edges": [list(e) for e in edges]}


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


def parse_seconds(text: str, loader: type) -> float:
    t0 = time.perf_counter()
    yaml.load(text, Loader=loader)  # noqa: S506 - safe loaders only
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--policies", default="all-gpu,heft,agent-rules")
    a = ap.parse_args()
    rng = random.Random(0)
    doc = make_workflow(a.tasks, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.yaml"
        text = yaml.safe_dump(doc)
        path.write_text(text)
        print(f"workflow: {a.tasks:,} tasks, {len(doc['edges']):,} edges, {len(text) / 2**20:.2f} MiB YAML "
              f"(caps: {MAX_TASKS:,} tasks, {MAX_EDGES:,} edges)")
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
        bomb.write_text("name: bomb\ntasks: {A: clip, B: clip}\nedge: &e [A, B]\nedges: ["
                        + ", ".join(["*e"] * n_alias) + "]\n")
        s, code, last = timed_cli("show", str(bomb))
        print(f"{'refuse 2M aliased edges':36s} {s:8.2f} {s / TARGET_S:9.2f}  exit {code}: {last[:70]}")


if __name__ == "__main__":
    main()
