"""The runtime monitor (paper section 3.2, Algorithm 1): consequences in, evidence out."""

from agentsched.monitor.config import MonitorConfig
from agentsched.monitor.monitor import RuntimeMonitor
from agentsched.monitor.records import BestMapping, Evidence, Hint, HistoryEntry, LatencyAverage, WhatIf

__all__ = [
    "BestMapping",
    "Evidence",
    "Hint",
    "HistoryEntry",
    "LatencyAverage",
    "MonitorConfig",
    "RuntimeMonitor",
    "WhatIf",
]
