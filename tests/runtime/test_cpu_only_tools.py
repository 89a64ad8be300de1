"""A workflow whose tools all declare ``has_gpu = False``: no learner places them on a GPU mode, and the
monitor asks no what-if of one (issue 48, item 9). A GPU placement would run the same host code: every
probe of it is wasted and a learned mapping naming it is meaningless."""

from __future__ import annotations

import textwrap

import pytest

from agentsched import Runtime
from agentsched.model.tool import cold_card
from agentsched.model.workflow import DecisionSpace, Mode, task_modes
from agentsched.model.workflow_io import load_workflow_file
from agentsched.store import Store
from agentsched.testbeds.spec import TestbedSpec

TOOLS = textwrap.dedent("""
    import agentsched


    class Upper(agentsched.Tool):
        workload = "upper-case a text"
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            return inputs["text"].upper()


    class Count(agentsched.Tool):
        workload = "count the words"
        has_gpu = False

        def run(self, inputs):
            return len(next(iter(inputs.values())).split())
""")


@pytest.fixture
def host_only(tmp_path, monkeypatch):
    (tmp_path / "hostonly_tools.py").write_text(TOOLS)
    (tmp_path / "hostonly.yaml").write_text(
        textwrap.dedent("""
        name: hostonly
        decision_space: three_way
        tasks:
          A: {tool: "hostonly_tools:Upper"}
          B: {tool: "hostonly_tools:Count"}
          C: {tool: "hostonly_tools:Count"}
        edges: [[A, B], [A, C]]
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return load_workflow_file(tmp_path / "hostonly.yaml")


def test_a_host_only_tool_may_be_placed_on_cpu_alone(host_only):
    card = cold_card("hostonly_tools:Upper", None)
    assert not card.has_gpu and "no-gpu" in card.tags  # cold-start policies read tags
    assert task_modes(DecisionSpace.THREE_WAY, card) == (Mode.CPU,)
    assert set(task_modes(DecisionSpace.BINARY, host_only.task_cards["A"])) == {Mode.CPU}


@pytest.mark.parametrize("policy", [None, "agent-rules-cold"])
def test_the_learner_never_places_host_only_tools_on_a_gpu_mode(host_only, tmp_path, policy):
    store = tmp_path / "s.db"
    extra = {} if policy is None else {"policy": policy}
    with Runtime(
        host_only,
        store=store,
        testbed=TestbedSpec(kind="local", cpu_slots=2),
        round_size=2,
        explore_fraction=0.5,
        **extra,
    ) as rt:
        for i in range(30):
            assert rt.invoke(text=f"a few words {i}").ok
    st = Store(store, read_only=True)
    (ln,) = st.learners()
    placed = {m for row in st.executions(ln.id) for m in row.mapping.values()}
    rounds = {m for r in st.rounds(ln.id) for m in r.mapping.values()}
    st.close()
    assert placed == rounds == {"cpu"}
