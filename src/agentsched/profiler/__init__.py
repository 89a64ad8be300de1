"""The offline profiler (``agentsched profile``): real tools -> a card set for this machine."""

from agentsched.profiler.profiler import (
    Measurement,
    ProfileError,
    ProfileRun,
    build_card_set,
    machine_info,
    measure,
    profile,
)

__all__ = ["Measurement", "ProfileError", "ProfileRun", "build_card_set", "machine_info", "measure", "profile"]
