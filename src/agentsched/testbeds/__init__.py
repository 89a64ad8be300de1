"""Testbeds: where a workflow is executed. One driver (``driver.Driver``) over one backend per kind
of machine: the simulator (``sim``) and real execution on this machine (``local``)."""

from agentsched.model.rules import Dispatcher, Infeasible, Start
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.driver import Backend, Completion, Driver, Failure
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, TestbedSpec
from agentsched.testbeds.world import World, load_world

__all__ = [
    "Backend",
    "Completion",
    "Dispatcher",
    "Driver",
    "Failure",
    "Infeasible",
    "SimTestbed",
    "Start",
    "Testbed",
    "TestbedSpec",
    "DEFAULT_NOISE_SIGMA",
    "World",
    "load_world",
]
