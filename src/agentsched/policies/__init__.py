"""Placement policies: the interface (``base``), the registry (``registry.make_policy``) and one
module per policy. Policy modules are imported lazily by the registry."""

from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult
from agentsched.policies.registry import PolicyName, list_policies, make_policy

__all__ = ["Policy", "PolicyContext", "PolicyName", "Proposal", "RoundResult", "list_policies", "make_policy"]
