"""Experiments: every harness (bench, ablation, agent-check, calibration) and the paper's figures.

They all run policies through the one run loop (``loop.runner.run_loop``) via ``harness.run_scored``
and score against an oracle computed here for scoring only; ``report`` renders their results.
"""
