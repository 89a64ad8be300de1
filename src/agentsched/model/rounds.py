"""Round records: what the run loop measured for one round (shared by the loop, the monitor and policies)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentsched.model.execution import Execution, Status
from agentsched.model.mapping import MappingT


def speaks(x: Execution, runs: Sequence[Execution], ran_well_before: bool = False) -> bool:
    """Does run ``x``, one of ``runs`` under one mapping (a round's; a probe: itself alone), tell of
    that mapping? A run that ended does; so does an oom, and a placed task that raised
    (``Execution.placement_failed``: it cannot be told apart from a tool that fails on its device),
    unless the tools are known to run on their devices: the mapping ran well before (a probe), or
    at least as many runs of the round ended well as raised so. Then this run's input broke a tool
    (a bad request among many served): it must not cost the mapping its verdict. A failure in host
    code never does."""
    if x.ok:
        return True
    if not x.placement_failed:
        return False
    if x.status is not Status.ERROR:
        return True
    ended = sum(1 for y in runs if y.ok)
    raised = sum(1 for y in runs if not y.ok and y.placement_failed and y.status is Status.ERROR)
    return not (ran_well_before or 0 < raised <= ended)


def first_cause(runs: Sequence[Execution]) -> Execution | None:
    """The failed run that sets a round's verdict (its status and message): the first that speaks."""
    return next((x for x in runs if not x.ok and speaks(x, runs)), None)


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
    message: str = ""  # why the round failed ("" when ok; says so when it had nothing to judge)
    # the round before ran the same mapping and had nothing to judge either: this one is judged after all
    # (summarize_runs), so a mapping whose GPU outputs break the host code is not rerun forever
    judged_again: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def judged(self) -> bool:
        """Does this round say anything about its mapping? Not when every run of it failed in host
        code (none ended well, none failed where its placement may be the cause: an LLM endpoint down
        for a minute): the same runs fail under any mapping. Such a round keeps its runs' status and
        message (history stays honest), but no learner may hold it for or against its mapping: no
        verdict, no timings, no infeasible mark. But only once in a row for one mapping
        (``judged_again``): the failure may be the mapping's after all (host code that cannot take
        what a GPU-placed tool returned), and the policies would propose it again forever."""
        return self.judged_again or any(speaks(x, self.executions) for x in self.executions)

    def counts_against(self, x: Execution) -> bool:
        """Does run ``x`` of this round count against its mapping? Never in a round with nothing to
        judge (``judged``). Else a failed run that tells of the mapping (``speaks``) does; any other
        failed run only when the round failed too (a placed task failed beside it: the host failure
        may follow from the placement, e.g. host code that cannot take what a GPU-placed tool
        returned)."""
        return self.judged and not x.ok and (speaks(x, self.executions) or not self.ok)
