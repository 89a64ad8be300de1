"""Fit the simulator's per-tool contention parameters (sensitivity s, pressure p) of the a5500 world.

Run once; the result is written into the world file src/agentsched/data/worlds/a5500.json (the
cards hold only what a profiler measures). Objective, with no
per-scenario tuning (one (s, p) per tool, shared by every scenario):
  * hinge penalty when a scenario's paper oracle mapping is more than 1.5% slower than the
    simulator's best (the check allows 2%; the margin keeps noise from flipping it),
  * a smaller penalty when it is not the strict best,
  * plus the S5 per-tool latency MAPE against Table 2.
Needs scipy: pip install -e '.[fit]'.

    python scripts/fit_contention.py [--iters 400] [--seed 0] [--write]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from agentsched.experiments.calibration import check_s5_latencies, check_scenario
from agentsched.scenarios import list_scenarios
from agentsched.testbeds.world import load_world

WORLD = Path(__file__).resolve().parents[1] / "src/agentsched/data/worlds/a5500.json"
TOOLS = ["ocr", "whisper_base", "vector_search", "image_resize", "resnet50", "groupby", "clip", "bert_base"]
SCEN = [s for s in list_scenarios() if int(s[1:]) >= 5]


def with_params(base, x):
    """The world ``base`` with the (s, p) of TOOLS taken from ``x``."""
    doc = base.model_dump(mode="json")
    for i, t in enumerate(TOOLS):
        doc["contention"][t] = {"sensitivity": float(x[2 * i]), "pressure": float(x[2 * i + 1])}
    return type(base).model_validate(doc)


def objective(x, base, verbose=False):
    if np.any(x < 0) or np.any(x > 6):
        return 1e6
    world = with_params(base, x)
    pen = 0.0
    for s in SCEN:
        c = check_scenario(s, world=world)
        r = c.ratio if c.ratio is not None else 3.0
        pen += 100 * max(0.0, r - 1.015) + 5 * max(0.0, r - 1.0)
    lat = check_s5_latencies(world=world)
    mape = sum(v.ape for v in lat) / len(lat)
    if verbose:
        print(f"penalty {pen:.3f} mape {mape:.3f}")
    return pen + mape


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    base = load_world(WORLD)
    rng = random.Random(a.seed)
    best_x, best_f = None, float("inf")
    for _ in range(a.iters):  # random restarts seed the local search
        x = np.array([rng.uniform(0, 3) if i % 2 == 0 else rng.uniform(0, 2) for i in range(2 * len(TOOLS))])
        f = objective(x, base)
        if f < best_f:
            best_x, best_f = x, f
    print("random search best", best_f)
    res = minimize(
        objective,
        best_x,
        args=(base,),
        method="Nelder-Mead",
        options={"maxiter": 4000, "xatol": 1e-3, "fatol": 1e-5, "adaptive": True},
    )
    x = np.round(res.x, 3)
    print("refined", objective(x, base, verbose=True))
    for i, t in enumerate(TOOLS):
        print(f"{t:15s} s={x[2 * i]:.3f} p={x[2 * i + 1]:.3f}")
    if a.write:
        doc = json.loads(WORLD.read_text())
        for i, t in enumerate(TOOLS):
            doc["contention"][t] = {"sensitivity": float(x[2 * i]), "pressure": float(x[2 * i + 1])}
        WORLD.write_text(json.dumps(doc, indent=1) + "\n")
        print("written", WORLD)


if __name__ == "__main__":
    main()
