"""The testbed interface: execute a workflow under a mapping, return an ``Execution``.

Every testbed of the package is a ``driver.Driver`` over one backend (``sim``, ``local``); this ABC
is what the rest of the code (oracle, loop, experiments, CLI) relies on, and nothing else: no
caller discovers optional methods by name.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from agentsched.model.execution import Execution
from agentsched.model.workflow import Mode, Workflow


class Testbed(ABC):
    """Something that runs workflows: the simulator, or real execution on this machine."""

    __test__ = False
    #: short name, recorded in every ``Execution.testbed`` (e.g. "sim", "local")
    name: str = "testbed"
    #: True when repeated runs of one mapping give one answer (the noise-free simulator).
    deterministic: bool = False

    @abstractmethod
    def run(
        self,
        workflow: Workflow,
        mapping: Mapping[str, Mode],
        *,
        rng: random.Random | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Execute once. ``mapping`` must be complete and valid (see ``validate_mapping``).

        ``rng``: the noise generator of a simulated testbed (None: its own); a real testbed ignores
        it. ``inputs``: the invocation's arguments (name -> value), given to every source task; a
        task with predecessors receives ``{pred_task_id: pred_output}`` instead."""

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution | None:
        """The noise-free execution when the testbed can compute one (the simulator, whatever its
        noise), else None: the oracle then measures instead."""
        return None

    def begin_round(self, index: int) -> None:
        """The run loop starts round ``index`` (before its probes and runs; round 0 before the
        policy's reset). A testbed whose machine changes between rounds (the simulator in a
        drifting world) switches here; every other testbed ignores it. Calling it twice with one
        index is harmless."""
        return None

    def preflight(self, workflow: Workflow) -> None:
        """Raise a one-line ``TestbedError`` before any run when this testbed cannot run the
        workflow's placements at all (e.g. GPU placements on a machine without CUDA)."""
        return None

    def host_only(self, workflow: Workflow) -> bool:
        """Do ``workflow``'s GPU placements run as host code here (a machine without a CUDA GPU, a
        cluster without GPUs)? Callers then run it as ``real.host_only_workflow`` (said once).
        False here: placements run where they are placed."""
        return False

    def gpu_unfit(self, workflow: Workflow) -> dict[str, str]:
        """GPU-capable tasks whose VRAM no GPU here can ever hold (a cluster's largest node offers
        less), though the workflow's budget would: task -> why, one line. Callers run those tasks
        host-only (``real.host_only_workflow``), so no policy keeps proposing what never runs. None
        here."""
        return {}

    def close(self) -> None:
        """Release resources (worker pools, loaded models). The testbed may not be used after."""
        return None
