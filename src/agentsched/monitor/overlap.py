"""Which GPU spans ran at the same time as another: the monitor's evidence of contention (Factor A)."""

from __future__ import annotations


def overlapping(spans: list) -> list:
    """The spans whose run interval [start + load, end) overlaps another's, in start order. A sweep
    over the sorted intervals (linear after the sort) instead of comparing every pair, which was
    quadratic on a workflow with thousands of GPU tasks; a zero-length interval takes the pairwise
    path (the sweep's argument needs positive lengths)."""
    ivs = sorted(((sp.start_ms + sp.load_ms, sp.end_ms, k) for k, sp in enumerate(spans)))
    if any(e <= s0 for s0, e, _ in ivs):
        out = []
        for i, a in enumerate(spans):
            for b in spans[i + 1 :]:
                if a.start_ms + a.load_ms < b.end_ms and b.start_ms + b.load_ms < a.end_ms:
                    out.extend((a, b))
        return out
    flagged = []
    max_end = float("-inf")
    for i, (s0, e, k) in enumerate(ivs):
        # an earlier-starting interval still running at s0, or the next one starting before e
        if max_end > s0 or (i + 1 < len(ivs) and ivs[i + 1][0] < e):
            flagged.append(spans[k])
        max_end = max(max_end, e)
    return flagged
