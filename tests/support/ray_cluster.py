"""A real multi-node Ray cluster on this machine for the Ray testbed tests, joined and torn down."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def ray_cluster(head: dict[str, Any], *workers: dict[str, Any]) -> Iterator[Any]:
    """Start a ``ray.cluster_utils.Cluster`` (head node + ``workers``), join it, shut both down after."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args=head)
    for w in workers:
        c.add_node(**w)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
