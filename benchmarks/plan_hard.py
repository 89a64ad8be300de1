"""agent-plan on hard cases (issue 45), side by side with agent-rules and starpu, in one run.

    python benchmarks/plan_hard.py [--workflows N] [--seeds 0,1] [--jobs J] [--prefix report] [--only hard|scale]

A. Hard cases (``hard_cases.py``): three-way workflows of 6-10 tasks with two or three large-model tools,
   a budget within 1-5% of the best mapping's peak, in worlds whose cards understate VRAM (default: a5500
   contention; perturbed: another contention as well); 20 rounds x 5 executions, seeds as given. Against
   the robust reference (the best mapping whose OOM rate over 100 noisy runs is at most 1%) and, beside it,
   the noise-free oracle: mean round-5 ratio (a round-5 mapping out of memory without noise counts as 2x),
   % of runs equivalent (within 2%) by round 5, runs above 1.05x at the end, failed executions (every
   execution of the run, probes and round 0 included), rounds worse than the best mapping measured clean
   before them beyond noise (3%).
B. Scale: 50/100/200-task layered three-way workflows with tight budgets and large-model tools in an
   understated world, 10 rounds x 5 executions, seeds 0-4: final and best-round mapping vs the best known
   safe mapping (a noise-free local search plus every mapping the run used, the best whose OOM rate over
   50 noisy runs is 0).

Generator seeds: ``--prefix report`` (the default) for reported figures; ``tune`` was used while
developing the planner. Targets are the issue's; the table at the end says met/missed with the margin.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from hard_cases import HardCase, hard_case, large_workflow, oom_rate, reference_ms, references

from agentsched.errors import AgentschedError
from agentsched.loop.best_known import best_known, noise_free_e2e
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import run_loop
from agentsched.testbeds.sim import SimTestbed

NOISE = 0.03
POLICIES = ("agent-plan", "agent-rules", "starpu")
EQUIVALENT = 1.02
NOISE_SLACK = 1.03  # "worse than the best measured beyond noise"
INFEASIBLE_RATIO = 2.0
results: list[tuple[str, float, str, bool, str]] = []


def target(name: str, measured: float, goal: str, met: bool, gap: str) -> None:
    results.append((name, measured, goal, met, gap))


# ---- A: hard cases -------------------------------------------------------------------------------
def _case(args: tuple[int, str, bool]) -> HardCase | None:
    return hard_case(*args)


def run_case(args: tuple[HardCase, tuple[int, ...], int, tuple[str, ...]]) -> list[dict]:
    case, seeds, rounds, policies = args
    wf, world = case.workflow, case.world
    cache: dict = {}
    oracle, robust, _ = references(case, cache=cache)
    rows = []
    for pol in policies:
        for seed in seeds:
            run = run_loop(
                wf, make_policy(pol), SimTestbed(noise_sigma=NOISE, world=world), rounds=rounds, repeats=5, seed=seed
            )
            ref = [reference_ms(wf, world, r.mapping, cache) for r in run.rounds]
            ratio = [INFEASIBLE_RATIO if v is None else v / robust for v in ref]
            first_eq = next((i for i, v in enumerate(ref) if v is not None and v <= robust * EQUIVALENT), None)
            execs = [x for rec in run.records for x in (*rec.probes, *rec.result.executions)]
            worse, best_seen = 0, math.inf
            for i, rec in enumerate(run.records):
                if i > 0 and math.isfinite(best_seen) and (ref[i] is None or ref[i] > best_seen * NOISE_SLACK):
                    worse += 1
                for x in (*rec.probes, *rec.result.executions):
                    if x.ok:
                        v = reference_ms(wf, world, x.mapping, cache)
                        if v is not None:
                            best_seen = min(best_seen, v)
            rows.append(
                {
                    "policy": pol,
                    "workflow": wf.name,
                    "seed": seed,
                    "r5": ratio[min(5, len(ratio) - 1)],
                    "eq5": first_eq is not None and first_eq <= 5,
                    "final": ratio[-1],
                    "failed": sum(not x.ok for x in execs),
                    "execs": len(execs),
                    "worse": worse,
                    "oracle_over_robust": oracle / robust,
                }
            )
    return rows


saved: dict[str, list[dict]] = {}  # world tag -> rows of section A (``--rows-out``)


def hard_section(a: argparse.Namespace, pool) -> None:
    seeds = tuple(int(s) for s in a.seeds.split(","))
    for label, perturbed in (("default (understated VRAM)", False), ("perturbed (contention + understated)", True)):
        t0 = time.perf_counter()
        cases: list[HardCase] = []
        start = a.first_index
        while len(cases) < a.workflows:
            batch = range(start, start + a.workflows - len(cases) + 4)
            cases += [c for c in pool.map(_case, [(i, a.prefix, perturbed) for i in batch]) if c is not None]
            start = batch.stop
        cases = cases[: a.workflows]
        tag = label.split()[0]
        rows = []
        for i, rs in enumerate(pool.imap(run_case, [(c, seeds, a.rounds, a.policies) for c in cases])):
            rows += rs
            print(f"  [{tag} {i + 1}/{len(cases)} {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        saved[tag] = rows
        title = f"A. {len(cases)} hard cases (indices from {a.first_index}) x seeds {a.seeds}, world {label}"
        summarise(f"{title}, {a.rounds} rounds x 5", rows, tag, time.perf_counter() - t0)


def summarise(title: str, rows: list[dict], tag: str, seconds: float) -> None:
    print(f"\n{title} [{seconds:.0f} s]")
    print(
        f"{'policy':12s} {'runs':>4s} {'R5/robust':>9s} {'eq by R5':>8s} {'final>1.05':>10s} {'final max':>9s} "
        f"{'failed':>7s} {'worse rounds':>12s} {'oracle/robust':>13s}"
    )
    by = defaultdict(list)
    for r in rows:
        by[r["policy"]].append(r)
    for pol in POLICIES:
        rs = by[pol]
        if not rs:
            continue
        r5 = statistics.fmean(r["r5"] for r in rs)
        eq5 = sum(r["eq5"] for r in rs) / len(rs)
        above = sum(r["final"] > 1.05 for r in rs)
        failed = sum(r["failed"] for r in rs) / sum(r["execs"] for r in rs)
        worse = sum(r["worse"] for r in rs)
        orr = statistics.fmean(r["oracle_over_robust"] for r in rs)
        print(
            f"{pol:12s} {len(rs):4d} {r5:9.4f} {eq5:8.1%} {above:10d} {max(r['final'] for r in rs):9.4f} "
            f"{failed:7.2%} {worse:12d} {orr:13.4f}"
        )
        if pol == "agent-plan":
            target(f"{tag}: R5 / robust reference", r5, "<= 1.01", r5 <= 1.01, f"{r5 - 1.01:+.4f}")
            target(f"{tag}: eq. by R5", eq5, ">= 98%", eq5 >= 0.98, f"{eq5 - 0.98:+.1%}")
            target(f"{tag}: runs above 1.05x at the end", above, "0", above == 0, f"{above:+d} runs")
            target(f"{tag}: failed executions", failed, "<= 1%", failed <= 0.01, f"{failed - 0.01:+.2%}")
            target(f"{tag}: rounds worse than best measured", worse, "0", worse == 0, f"{worse:+d} rounds")
            for r in rs:
                if r["final"] > 1.05:
                    print(f"  above 1.05x at the end: {r['workflow']} seed {r['seed']}: {r['final']:.4f}")
    sys.stdout.flush()


# ---- B: scale --------------------------------------------------------------------------------------
def run_large(args: tuple[int, int, str, int]) -> tuple[str, int, int, float, float]:
    n, seed, prefix, evals = args
    wf, world = large_workflow(n, seed, prefix)
    tb = SimTestbed(noise_sigma=NOISE, world=world)
    run = run_loop(wf, make_policy("agent-plan"), tb, rounds=10, repeats=5, seed=seed)
    exact = SimTestbed(noise_sigma=0, world=world)
    used = [r.mapping for r in run.rounds] + [x.mapping for rec in run.records for x in rec.probes]
    known = best_known(wf, exact, max_evals=evals, extra=used)
    cands = {tuple(m[t] for t in wf.task_ids): m for m in [known.mapping, *used]}
    scored = sorted((ms, k) for k, m in cands.items() if (ms := noise_free_e2e(wf, exact, m)) is not None)
    rng = random.Random(f"safe:{wf.name}")
    safe = next(
        (
            ms
            for ms, k in scored
            if oom_rate(wf, world, dict(zip(wf.task_ids, k, strict=True)), 50, rng, stop_after=0) == 0
        ),
        math.inf,
    )
    final = (noise_free_e2e(wf, exact, run.rounds[-1].mapping) or math.inf) / safe
    ok = [r for r in run.rounds if r.e2e_ms is not None]
    best = min((noise_free_e2e(wf, exact, r.mapping) or math.inf for r in ok), default=math.inf) / safe
    return wf.name, n, seed, final, best


def scale_section(a: argparse.Namespace, pool) -> None:
    t0 = time.perf_counter()
    jobs = [(n, s, a.prefix, a.best_known_evals) for n in a.sizes for s in range(a.scale_seeds)]
    out = []
    for row in pool.imap(run_large, jobs):
        out.append(row)
        print(
            f"  [scale {row[0]} seed {row[2]}: final/safe {row[3]:.4f} {time.perf_counter() - t0:.0f} s]",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"\nB. large tight workflows (layered three-way, large-model tools, understated VRAM), 10 rounds x 5 "
        f"[{time.perf_counter() - t0:.0f} s]"
    )
    print(f"{'workflow':48s} {'seed':>4s} {'final/safe':>10s} {'best round/safe':>15s}")
    for name, _, seed, final, best in out:
        print(f"{name:48s} {seed:4d} {final:10.4f} {best:15.4f}")
    for n in a.sizes:
        worst = max(f for _, m, _, f, _ in out if m == n)
        target(
            f"{n} tasks: final / best known safe (worst seed)", worst, "<= 1.02", worst <= 1.02, f"{worst - 1.02:+.4f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workflows", type=int, default=100, help="hard cases per world (default 100)")
    ap.add_argument("--seeds", default="0,1", help="loop seeds of section A, comma-separated (default 0,1)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--prefix", default="report", help="generator seed set (report: reported; tune: development)")
    ap.add_argument("--sizes", default="50,100,200", help="section B workflow sizes")
    ap.add_argument("--scale-seeds", type=int, default=5)
    ap.add_argument("--best-known-evals", type=int, default=600)
    ap.add_argument("--only", choices=("hard", "scale"))
    ap.add_argument("--policies", default=",".join(POLICIES), help="section A policies (default: all three)")
    ap.add_argument("--first-index", type=int, default=0, help="first generator index of section A")
    ap.add_argument("--rows-out", help="write section A's rows (JSON) here")
    ap.add_argument("--rows-in", nargs="+", help="summarise section A from these --rows-out files instead of running")
    a = ap.parse_args()
    if a.workflows < 1 or a.jobs < 1 or a.rounds < 6:
        ap.error("--workflows and --jobs must be >= 1, --rounds >= 6")
    a.sizes = tuple(int(s) for s in a.sizes.split(","))
    a.policies = tuple(p for p in a.policies.split(",") if p)
    t0 = time.perf_counter()
    if a.rows_in:
        merged: dict[str, list[dict]] = defaultdict(list)
        for path in a.rows_in:
            for tag, rows in json.loads(Path(path).read_text()).items():
                merged[tag] += rows
        for tag, rows in merged.items():
            summarise(
                f"A. {len({r['workflow'] for r in rows})} hard cases from {len(a.rows_in)} file(s), world {tag}",
                rows,
                tag,
                0.0,
            )
        a.only = "hard-done"
    with multiprocessing.Pool(a.jobs) as pool:
        if a.only in (None, "hard"):
            hard_section(a, pool)
            if a.rows_out:
                Path(a.rows_out).write_text(json.dumps(saved))
        if a.only in (None, "scale"):
            scale_section(a, pool)
    print(f"\nTargets (measured in this run, {time.perf_counter() - t0:.0f} s, generator set {a.prefix!r})")
    print(f"{'target':52s} {'measured':>9s} {'goal':>9s} {'':6s} gap")
    for name, measured, goal, met, gap in results:
        print(f"{name:52s} {measured:9.4f} {goal:>9s} {'met' if met else 'MISSED':6s} {gap}")


if __name__ == "__main__":
    try:
        main()
    except AgentschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
