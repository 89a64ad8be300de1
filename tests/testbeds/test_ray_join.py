"""A ray testbed that joined a running cluster itself leaves it when the last such testbed closes
(before, the driver stayed connected for the life of the process, and a user's later
``Cluster.shutdown()`` raised); one whose process had joined Ray already leaves it joined."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from agentsched.model.workflow import Mode  # noqa: E402
from agentsched.model.workflow_io import parse_workflow  # noqa: E402
from agentsched.testbeds.ray import RayTestbed  # noqa: E402
from tests.support.sleep_tool import SleepFactory  # noqa: E402

pytestmark = pytest.mark.ray

WF = parse_workflow(
    {"name": "t", "cards": "a5500", "tasks": {"A": "groupby", "B": "doc_merger"}, "edges": [["A", "B"]]}, "t"
)


@pytest.fixture(scope="module")
def running_cluster():
    """A cluster this process has not joined."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def _ran(tb: RayTestbed) -> bool:
    return tb.run(WF, {"A": Mode.CPU, "B": Mode.CPU}, inputs={"q": 1}).ok


def test_the_last_testbed_that_joined_leaves_the_cluster(running_cluster):
    first = RayTestbed(address=running_cluster.address, tool_factory=SleepFactory(0.01))
    second = RayTestbed(address=running_cluster.address, tool_factory=SleepFactory(0.01))
    assert _ran(first) and _ran(second)
    first.close()
    assert ray.is_initialized() and _ran(second)  # the other testbed still runs on the connection
    second.close()
    assert not ray.is_initialized()


def test_a_process_that_joined_ray_itself_stays_joined(running_cluster):
    ray.init(address=running_cluster.address, log_to_driver=False, logging_level="ERROR")
    try:
        tb = RayTestbed(address=running_cluster.address, tool_factory=SleepFactory(0.01))
        assert _ran(tb)
        tb.close()
        assert ray.is_initialized()  # the user's connection: not ours to end
    finally:
        ray.shutdown()
