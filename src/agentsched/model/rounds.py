"""Round records: what the run loop measured for one round (shared by the loop, the monitor and policies)."""

from __future__ import annotations

from dataclasses import dataclass

from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import MappingT


@dataclass(frozen=True)
class RoundResult:
    """One round as the runner measured it."""

    round: int  # 0-based round index
    mapping: MappingT  # what the policy proposed
    status: Status  # ok when every run of the round finished, else the first failure
    e2e_ms: float | None  # median E2E over the round's runs; None when infeasible
    elapsed_ms: float  # median time the runs took (the cost of an infeasible round)
    peak_vram_mb: float  # max over the round's runs (for oom: what the failing start needed)
    executions: tuple[Execution, ...]  # the round's runs, in order
    executions_total: int  # executions so far in this run, probes included, this round's too
    message: str = ""  # why the round failed ("" when ok)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def counts_against(self, x: Execution) -> bool:
        """Does run ``x`` of this round count against its mapping? A run that failed where its
        placement may be the cause always does (``Execution.placement_failed``); one that failed in
        host code only when the round failed too (no run of it ended well: the failure may be the
        mapping's after all, e.g. host code that cannot take what a GPU-placed tool returned)."""
        return not x.ok and (x.placement_failed or not self.ok)
