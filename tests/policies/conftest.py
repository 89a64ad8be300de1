"""A PolicyContext for calling a baseline directly (the hand-made workflows are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from agentsched.model import Workflow


def context(wf: Workflow, seed: int = 0, rounds: int = 20, repeats: int = 5):
    """A PolicyContext for calling a policy directly (probes are not allowed here)."""
    import random

    from agentsched.policies.base import PolicyContext

    def no_probe(mapping):  # the classical baselines never probe
        raise AssertionError("unexpected probe")

    return PolicyContext(
        workflow=wf, cards=dict(wf.task_cards), rng=random.Random(seed), probe=no_probe, rounds=rounds, repeats=repeats
    )


@pytest.fixture
def make_context():
    return context
