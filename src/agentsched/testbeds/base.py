"""The testbed interface: execute a workflow under a mapping, return an ``Execution``."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping

from agentsched.model.execution import Execution
from agentsched.model.workflow import Mode, Workflow


class Testbed(ABC):
    """Something that runs workflows: the simulator, or real execution on this machine."""

    __test__ = False
    name: str = "testbed"
    #: True when repeated runs of one mapping give one answer (noise-free simulation).
    deterministic: bool = False

    @abstractmethod
    def run(
        self, workflow: Workflow, mapping: Mapping[str, Mode], *, rng: random.Random | None = None
    ) -> Execution:
        """Execute once. ``mapping`` must be complete and valid (see ``validate_mapping``)."""

    def expected(self, workflow: Workflow, mapping: Mapping[str, Mode]) -> Execution | None:
        """A noise-free execution when the testbed can give one (the simulator), else None."""
        return None

    def close(self) -> None:
        """Release resources (worker pools, loaded models)."""
