"""The closed scheduling loop and its metrics."""

from agentsched.loop.runner import LoopRun, RoundRecord, run_loop, summarize_runs

__all__ = ["LoopRun", "RoundRecord", "run_loop", "summarize_runs"]
