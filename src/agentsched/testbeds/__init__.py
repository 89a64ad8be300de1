"""Testbeds: where a workflow is executed (simulated here; real execution in ``local``)."""

from agentsched.testbeds.base import Testbed
from agentsched.testbeds.rules import Dispatcher, Infeasible, Start
from agentsched.testbeds.sim import SimTestbed

__all__ = ["Dispatcher", "Infeasible", "SimTestbed", "Start", "Testbed"]
