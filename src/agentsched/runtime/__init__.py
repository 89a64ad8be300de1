"""The runtime: user tools run on demand, learning their placement across invocations."""

from agentsched.runtime.runtime import InvokeResult, Runtime
from agentsched.runtime.setup import COLD_CAPABLE
from agentsched.runtime.tools_workflow import workflow_from_tools

__all__ = ["COLD_CAPABLE", "InvokeResult", "Runtime", "workflow_from_tools"]
