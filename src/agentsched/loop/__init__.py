"""The closed scheduling loop and its metrics."""

from agentsched.loop.metrics import OracleView, RunMetrics, oracle_view, run_metrics
from agentsched.loop.runner import LoopRun, RoundRecord, reference_oracle, run_loop, summarize_runs

__all__ = [
    "LoopRun",
    "OracleView",
    "RoundRecord",
    "RunMetrics",
    "oracle_view",
    "reference_oracle",
    "run_loop",
    "run_metrics",
    "summarize_runs",
]
