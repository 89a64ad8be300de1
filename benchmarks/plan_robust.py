"""agent-plan when its model is wrong (issue 17), side by side with agent-rules, in one run.

    python benchmarks/plan_robust.py [--quick] [--skip-scale]

Suites are generated here (seeds prefixed ``robust:``, never S1-S13 only), sized so the whole run
fits in about 10 minutes on 2 cores (--quick: about 2 minutes):

A. Worlds: small generated workflows (4-10 tasks, binary and three-way, chain/fan-out/layered/random,
   budget tightness 0-0.5) in the default world, perturbed worlds (a different perturbation per
   workflow), each alternative contention law (a5500-max, -power, -threshold, -saturating) and heavy
   noise (a5500-heavy), 12 rounds x 5 runs, beside agent-rules and the oracle policy itself (whose
   regret is the noise's own: under heavy noise the regret target is judged on the excess over it):
   round-5 mapping / oracle, % oracle-equivalent by round 5, regret, rounds re-running a mapping that ran out of memory earlier in the same world, final
   mapping vs the best mapping measured in the run (reference E2Es, so noise never decides).
B. VRAM-tight suite: 8-task three-way and 10-task binary workflows with budget tightness 0.5-0.7 in
   perturbed worlds: failed executions after round 0, repeated-OOM rounds.
C. Drift: ``drift:A,B,10`` between the default world and a perturbed one (both directions), on the
   generated workflows whose oracle changes with the world and whose B oracle survives 20 noisy runs
   (a noise-free oracle that runs out of memory under noise is no target: holding it means failing),
   20 rounds: oracle-equivalent (under B) within 5 and 10 rounds of the switch, regret after it
   (against B's oracle).
D. Scale: 50/100/200-task layered three-way workflows, 10 rounds x 5 executions, seeds 0-4: final
   mapping vs the best known (a noise-free local search plus every mapping the run used); planner
   time per round at 100 tasks.
E. S1-S13 warm and cold: oracle-equivalent by round 1.

Targets are the issue's; the table at the end says met/missed with the margin.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import time

from plan_targets import Timed, results, target  # shared: the planner timer and the target table

from agentsched.errors import AgentschedError
from agentsched.loop.best_known import best_known, noise_free_e2e
from agentsched.loop.metrics import OracleView, oracle_view, regret_fraction, run_metrics
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import LoopRun, reference_oracle, run_loop
from agentsched.model.generate import generate_workflow
from agentsched.model.workflow import Workflow
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds.sim import SimTestbed

NOISE = 0.03
LAWS = ("a5500-max", "a5500-power", "a5500-threshold", "a5500-saturating")
TOPOLOGIES = ("chain", "fan-out", "layered", "random")


# ---- suites ------------------------------------------------------------------------------------
def small_suite(count: int, tight: tuple[float, ...], tag: str) -> list[Workflow]:
    out = []
    for i in range(count):
        rng = random.Random(f"robust:{tag}:{i}")
        space = ("binary", "three_way")[i % 2]
        n = rng.randint(4, 7 if space == "three_way" else 10)  # the oracle enumerates 3^7 / 2^10 mappings
        out.append(
            generate_workflow(
                tasks=n,
                topology=TOPOLOGIES[(i // 2) % 4],
                space=space,
                budget_tightness=rng.choice(tight),
                seed=1000 + i,
            )
        )
    return out


def tight_suite(count: int) -> list[Workflow]:
    out = []
    for i in range(count):
        rng = random.Random(f"robust:tight:{i}")
        space = ("three_way", "binary")[i % 2]
        out.append(
            generate_workflow(
                tasks=8 if space == "three_way" else 10,
                topology=("layered", "random")[(i // 2) % 2],
                space=space,
                budget_tightness=rng.choice((0.5, 0.6, 0.7)),
                seed=2000 + i,
            )
        )
    return out


# ---- one run's figures ----------------------------------------------------------------------------
@dataclasses.dataclass
class Stats:
    policy: str
    r5_ratio: float | None
    eq_by5: bool
    regret: float
    failed_after0: int
    execs_after0: int
    repeated_oom: int  # rounds/probes re-running a mapping that failed earlier in the same world
    final_vs_best: float  # reference E2E of the final mapping / best reference among mappings run without failure
    changes: int  # rounds with a detected change (in a stationary world: false alarms)


def _key(view: OracleView, m) -> tuple:
    return tuple(m[t] for t in view.task_ids)


def run_stats(run: LoopRun, view: OracleView, policy: str, switch: int | None = None) -> Stats:
    m = run_metrics(run, view)
    r5 = run.rounds[min(5, len(run.rounds) - 1)]
    ref5 = view.reference(r5.mapping)
    failed: set[tuple] = set()
    ok_keys: set[tuple] = set()
    repeated = failed_after0 = execs_after0 = 0
    for i, rec in enumerate(run.records):
        if switch is not None and i == switch:
            failed.clear()  # another world: an earlier failure is no longer the same conditions
        # a probe, or a round, whose mapping failed earlier in the run re-ran a known OOM
        repeated += sum(1 for x in rec.probes if _key(view, x.mapping) in failed)
        repeated += _key(view, rec.result.mapping) in failed
        for x in (*rec.probes, *rec.result.executions):
            k = _key(view, x.mapping)
            (ok_keys if x.ok else failed).add(k)
            if i > 0:
                execs_after0 += 1
                failed_after0 += not x.ok
    clean = [view.reference(dict(zip(view.task_ids, k, strict=True))) for k in ok_keys - failed]
    clean = [c for c in clean if c is not None]
    final = view.reference(run.rounds[-1].mapping)
    fvb = (final / min(clean)) if final is not None and clean else math.inf
    return Stats(
        policy,
        None if ref5 is None else ref5 / view.e2e_ms,
        m.first_equivalent_round is not None and m.first_equivalent_round <= 5,
        m.regret,
        failed_after0,
        execs_after0,
        repeated,
        fvb,
        sum(1 for rec in run.records if "change" in (rec.evidence or {})),
    )


def summary(rows: list[Stats], pol: str) -> dict[str, float]:
    rs = [r for r in rows if r.policy == pol]
    ratios = [r.r5_ratio for r in rs if r.r5_ratio is not None]
    ex = sum(r.execs_after0 for r in rs)
    return {
        "runs": len(rs),
        "r5": statistics.fmean(ratios) if ratios else math.inf,
        "r5_oom": sum(1 for r in rs if r.r5_ratio is None),
        "eq5": sum(r.eq_by5 for r in rs) / len(rs),
        "regret": statistics.fmean(r.regret for r in rs),
        "repeated": sum(r.repeated_oom for r in rs),
        "failed": sum(r.failed_after0 for r in rs) / ex if ex else 0.0,
        "final_vs_best": max(r.final_vs_best for r in rs),
        "changes": sum(r.changes for r in rs),
    }


def print_rows(title: str, rows: list[Stats], policies) -> dict[str, dict[str, float]]:
    print(f"\n{title}")
    print(
        f"{'policy':14s} {'runs':>4s} {'R5/oracle':>9s} {'R5 oom':>6s} {'eq by R5':>8s} {'regret':>7s} "
        f"{'rep.OOM':>7s} {'failed>R0':>9s} {'final/bestmeas(max)':>19s} {'changes':>7s}"
    )
    out = {}
    for pol in policies:
        s = out[pol] = summary(rows, pol)
        print(
            f"{pol:14s} {s['runs']:4d} {s['r5']:9.4f} {s['r5_oom']:6d} {s['eq5']:8.1%} {s['regret']:7.4f} "
            f"{s['repeated']:7d} {s['failed']:9.2%} {s['final_vs_best']:19.4f} {s['changes']:7d}"
        )
    sys.stdout.flush()
    return out


def run_suite(wfs: list[Workflow], world_of, policies, rounds: int) -> list[Stats]:
    rows = []
    for i, wf in enumerate(wfs):
        tb = SimTestbed(noise_sigma=NOISE, world=world_of(i))
        try:
            oracle = reference_oracle(wf, tb)
        except AgentschedError:
            continue  # no feasible mapping in this world
        view = oracle_view(wf, oracle)
        for pol in policies:
            # the oracle reference is handed the oracle searched on this testbed (it never builds one)
            policy = make_policy(pol, oracle=oracle) if pol == "oracle" else make_policy(pol)
            run = run_loop(wf, policy, tb, rounds=rounds, repeats=5, seed=i)
            rows.append(run_stats(run, view, pol))
    return rows


# ---- sections -------------------------------------------------------------------------------------
def worlds_section(quick: bool) -> None:
    wfs = small_suite(10 if quick else 40, (0.0, 0.3, 0.5), "worlds")
    worlds = [("a5500", lambda i: "a5500", 1.01), ("perturbed", lambda i: f"perturbed:{100 + i}", 1.01)]
    worlds += [(w, (lambda name: lambda i: name)(w), 1.02) for w in LAWS + ("a5500-heavy",)]
    pols = ("agent-plan", "agent-rules", "oracle")
    for label, world_of, goal in worlds:
        s = print_rows(
            f"A. {len(wfs)} generated 4-10-task workflows, world {label}, 12 rounds x 5 runs",
            run_suite(wfs, world_of, pols, 12),
            pols,
        )
        p = s["agent-plan"]
        eq_goal = 0.98 if goal == 1.01 else 0.95
        target(
            f"{label}: R5 mapping / oracle",
            p["r5"],
            f"<= {goal}",
            p["r5"] <= goal and not p["r5_oom"],
            f"{p['r5'] - goal:+.4f}" + (f", {p['r5_oom']} infeasible" if p["r5_oom"] else ""),
        )
        target(f"{label}: eq. by R5", p["eq5"], f">= {eq_goal:.0%}", p["eq5"] >= eq_goal, f"{p['eq5'] - eq_goal:+.1%}")
        if label == "a5500-heavy":
            # heavy-tailed noise and stragglers cost even the oracle's own mapping: judged on the excess
            excess = p["regret"] - s["oracle"]["regret"]
            target(
                f"{label}: regret minus the oracle policy's", excess, "<= 0.03", excess <= 0.03, f"{excess - 0.03:+.4f}"
            )
        else:
            target(f"{label}: regret", p["regret"], "<= 0.03", p["regret"] <= 0.03, f"{p['regret'] - 0.03:+.4f}")
        target(f"{label}: repeated-OOM rounds", p["repeated"], "0", p["repeated"] == 0, f"{p['repeated']:+.0f}")
        target(
            f"{label}: final / best measured (worst run)",
            p["final_vs_best"],
            "<= 1.02",
            p["final_vs_best"] <= 1.02,
            f"{p['final_vs_best'] - 1.02:+.4f}",
        )


def tight_section(quick: bool) -> None:
    wfs = tight_suite(8 if quick else 24)
    rows = run_suite(wfs, lambda i: f"perturbed:{200 + i}", ("agent-plan", "agent-rules"), 12)
    s = print_rows(
        f"B. {len(wfs)} VRAM-tight workflows (tightness 0.5-0.7), perturbed worlds, 12 rounds x 5 runs",
        rows,
        ("agent-plan", "agent-rules"),
    )
    p = s["agent-plan"]
    target(
        "VRAM-tight: failed executions after R0",
        p["failed"],
        "<= 1%",
        p["failed"] <= 0.01,
        f"{p['failed'] - 0.01:+.2%}",
    )
    target("VRAM-tight: repeated-OOM rounds", p["repeated"], "0", p["repeated"] == 0, f"{p['repeated']:+.0f}")
    target(
        "VRAM-tight: final / best measured (worst run)",
        p["final_vs_best"],
        "<= 1.02",
        p["final_vs_best"] <= 1.02,
        f"{p['final_vs_best'] - 1.02:+.4f}",
    )


def drift_pairs(quick: bool) -> list[tuple[Workflow, str, str, OracleView, OracleView]]:
    """Generated workflows whose oracle under B is not equivalent under A (and so must change)."""
    out = []
    want = 8 if quick else 24
    for i in range(800):
        if len(out) >= want:
            break
        rng = random.Random(f"robust:drift:{i}")
        space = ("binary", "three_way")[i % 2]
        wf = generate_workflow(
            tasks=rng.randint(5, 7 if space == "three_way" else 9),
            topology=TOPOLOGIES[(i // 2) % 4],
            space=space,
            budget_tightness=rng.choice((0.0, 0.3)),
            seed=3000 + i,
        )
        other = f"perturbed:{300 + i}"
        a, b = ("a5500", other) if i % 2 == 0 else (other, "a5500")  # both directions
        try:
            va = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=a)))
            vb = oracle_view(wf, reference_oracle(wf, SimTestbed(noise_sigma=0, world=b)))
        except AgentschedError:
            continue
        if (not vb.equivalent(va.best) or not va.equivalent(vb.best)) and robust_oracle(wf, b, vb):
            out.append((wf, a, b, va, vb))
    return out


def robust_oracle(wf: Workflow, world: str, view: OracleView, runs: int = 20) -> bool:
    """Does the (noise-free) oracle mapping survive ``runs`` noisy executions? Where it does not (a start
    that fits only in the noise-free order), being oracle-equivalent means running out of memory."""
    tb = SimTestbed(noise_sigma=NOISE, world=world)
    rng = random.Random(f"robust:oracle:{wf.name}")
    return all(tb.run(wf, dict(view.best), rng=rng).ok for _ in range(runs))


def drift_section(quick: bool, switch: int = 10, rounds: int = 20) -> None:
    pairs = drift_pairs(quick)
    print(
        f"\nC. drift at round {switch}: {len(pairs)} workflows whose oracle changes with the world, {rounds} rounds x 5"
    )
    print(f"{'policy':14s} {'runs':>4s} {'eq<=5':>6s} {'eq<=10':>6s} {'regret after':>12s} {'detected':>8s}")
    for pol in ("agent-plan", "agent-rules"):
        w5 = w10 = det = 0
        regrets = []
        for i, (wf, a, b, _va, vb) in enumerate(pairs):
            tb = SimTestbed(noise_sigma=NOISE, world=f"drift:{a},{b},{switch}")
            run = run_loop(wf, make_policy(pol), tb, rounds=rounds, repeats=5, seed=i)
            first = next((r.round for r in run.rounds[switch:] if vb.equivalent(r.mapping)), None)
            w5 += first is not None and first - switch < 5
            w10 += first is not None and first - switch < 10
            after = [x for rec in run.records[switch:] for x in (*rec.probes, *rec.result.executions)]
            regrets.append(regret_fraction(after, vb.e2e_ms))
            det += any(
                "change" in (rec.evidence or {}) or "change" in rec.proposal_info for rec in run.records[switch:]
            )
        n = max(len(pairs), 1)
        reg = statistics.fmean(regrets) if regrets else math.inf
        print(f"{pol:14s} {len(pairs):4d} {w5 / n:6.1%} {w10 / n:6.1%} {reg:12.4f} {det:8d}")
        if pol == "agent-plan":
            target("drift: eq. within 5 rounds of the switch", w5 / n, ">= 90%", w5 / n >= 0.9, f"{w5 / n - 0.9:+.1%}")
            target(
                "drift: eq. within 10 rounds of the switch",
                w10 / n,
                ">= 98%",
                w10 / n >= 0.98,
                f"{w10 / n - 0.98:+.1%}",
            )
            target("drift: regret after the switch", reg, "<= 0.05", reg <= 0.05, f"{reg - 0.05:+.4f}")
    sys.stdout.flush()


def scale_section(quick: bool) -> None:
    sizes = (50, 100) if quick else (50, 100, 200)
    seeds = range(2) if quick else range(5)
    tb = SimTestbed(noise_sigma=NOISE)
    print("\nD. large generated workflows (layered, three-way, tightness 0.3), 10 rounds x 5 executions")
    print(f"{'workflow':40s} {'final/known':>11s} {'best/known':>10s} {'planner s/round':>15s}")
    per_round_100: list[float] = []
    for n in sizes:
        worst = 0.0
        for seed in seeds:
            wf = generate_workflow(tasks=n, topology="layered", space="three_way", budget_tightness=0.3, seed=seed)
            p = Timed(make_policy("agent-plan"))
            run = run_loop(wf, p, tb, rounds=10, repeats=5, seed=seed)  # type: ignore[arg-type]
            ref = best_known(wf, tb, max_evals=300 if quick else 600, extra=[r.mapping for r in run.rounds])
            final = (noise_free_e2e(wf, tb, run.rounds[-1].mapping) or math.inf) / ref.e2e_ms
            ok = [r for r in run.rounds if r.e2e_ms is not None]
            best = min((noise_free_e2e(wf, tb, r.mapping) or math.inf for r in ok), default=math.inf) / ref.e2e_ms
            t = statistics.fmean(p.per_round_s)
            if n == 100:
                per_round_100.append(t)
            worst = max(worst, final)
            print(f"{wf.name:40s} {final:11.4f} {best:10.4f} {t:15.3f}")
        target(f"{n} tasks: final / best known (worst seed)", worst, "<= 1.02", worst <= 1.02, f"{worst - 1.02:+.4f}")
    t100 = statistics.fmean(per_round_100)
    target("planner time per round at 100 tasks (mean, s)", t100, "<= 1", t100 <= 1.0, f"{t100 - 1.0:+.2f} s")
    sys.stdout.flush()


def scenarios_section() -> None:
    tb = SimTestbed(noise_sigma=NOISE)
    for pol in ("agent-plan", "agent-plan-cold"):
        ok = 0
        for name in list_scenarios():
            wf = load_scenario(name)
            view = oracle_view(wf, reference_oracle(wf, tb))
            run = run_loop(wf, make_policy(pol), tb, rounds=4, repeats=5, seed=0)
            first = run_metrics(run, view).first_equivalent_round
            ok += first is not None and first <= 1
        print(f"E. {pol}: S1-S13 oracle-equivalent by round 1: {ok}/13")
        target(f"S1-S13 {pol}: eq. by R1", ok, "13/13", ok == 13, f"{ok - 13:+d} scenarios")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller suites (about 2 minutes)")
    ap.add_argument("--skip-scale", action="store_true", help="skip section D")
    ap.add_argument("--only", choices=("worlds", "tight", "drift", "scale", "scenarios"), help="one section")
    a = ap.parse_args()
    t0 = time.perf_counter()
    sections = {
        "worlds": lambda: worlds_section(a.quick),
        "tight": lambda: tight_section(a.quick),
        "drift": lambda: drift_section(a.quick),
        "scale": lambda: scale_section(a.quick),
        "scenarios": scenarios_section,
    }
    for name, fn in sections.items():
        if (a.only and name != a.only) or (a.skip_scale and name == "scale"):
            continue
        t = time.perf_counter()
        fn()
        print(f"[{name}: {time.perf_counter() - t:.0f} s]")
    print(f"\nTargets (measured in this run, {time.perf_counter() - t0:.0f} s)")
    print(f"{'target':52s} {'measured':>9s} {'goal':>9s} {'':6s} gap")
    for name, measured, goal, met, gap in results:
        print(f"{name:52s} {measured:9.4f} {goal:>9s} {'met' if met else 'MISSED':6s} {gap}")


if __name__ == "__main__":
    try:
        main()
    except AgentschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
