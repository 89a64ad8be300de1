"""HEFT's machine model and HEFT-CF's contention factor against the paper's HEFT column (Table 4,
"HEFT-CF": 3,3,3,4,3,3,4,3,3,2 on S1-S10, 2/10 full matches), measured on S1-S13 with the
noise-free simulator's oracle. HEFT is static, so each variant is one plan per scenario.

    python benchmarks/heft_models.py [--cpu-cores N]

Prints per variant: the strict match per scenario (tasks placed as in the oracle mapping or an exact
tie: the paper's reading), full matches on S1-S10 (strict, and lenient: within 2%), and on how many
of S1-S10 the strict match equals the paper's figure.
"""

from __future__ import annotations

import argparse

from agentsched.experiments.harness import scoring_view
from agentsched.experiments.heft_study import heft_study
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds.sim import SimTestbed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-cores", type=int, default=None, help="CPU cores of the plan (default: the model's)")
    a = ap.parse_args()
    sim = SimTestbed(noise_sigma=0.0, seed=None)
    wfs = {s: load_scenario(s) for s in list_scenarios()}
    views = {s: scoring_view(wf, sim)[1] for s, wf in wfs.items()}
    study = heft_study(wfs, views, cpu_cores=a.cpu_cores)
    t4 = study.table4
    print(f"paper {' '.join(f'{study.paper[s]}' for s in t4)}   full {study.paper_full}/10")
    print(f"{'variant':34s} " + " ".join(f"{s:>3s}" for s in study.scenarios) + "  strict  lenient  =paper")
    for v in study.variants:
        cells = " ".join(f"{v.exact[s]:>3d}" for s in study.scenarios)
        print(
            f"{v.label:34s} {cells}  {v.full(t4, exact=True):>3d}/10 {v.full(t4):>5d}/10 "
            f"{v.paper_agreement(study.paper, t4):>4d}/10"
        )
    print("closest to the paper:", "; ".join(v.label for v in study.closest()))


if __name__ == "__main__":
    main()
