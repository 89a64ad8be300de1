"""The offline profiler (``agentsched profile``): real tools -> a card set for this machine."""

from agentsched.profiler.host import machine_info
from agentsched.profiler.profiler import (
    Measurement,
    ProfileError,
    ProfilePlan,
    ProfileRun,
    build_card_set,
    measure,
    plan_profile,
    profile,
    run_plan,
)

__all__ = [
    "Measurement",
    "ProfileError",
    "ProfilePlan",
    "ProfileRun",
    "build_card_set",
    "machine_info",
    "measure",
    "plan_profile",
    "profile",
    "run_plan",
]
