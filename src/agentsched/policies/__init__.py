"""Placement policies: the interface (``base``) and one module per policy. The registry that builds
them by name lives in ``agentsched.loop.registry`` (the engine resolves which class to use)."""

from agentsched.policies.base import Policy, PolicyContext, Proposal, RoundResult

__all__ = ["Policy", "PolicyContext", "Proposal", "RoundResult"]
