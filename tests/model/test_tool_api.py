"""The public tool API: agentsched.Tool, import paths, in-memory tools, cold-start cards."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import agentsched
from agentsched.errors import ToolError, WorkflowError
from agentsched.model.tool import cold_card, is_tool_path, new_tool, register_tool, resolve_tool
from agentsched.model.workflow_io import parse_workflow


class Echo(agentsched.Tool):
    name = "echo"
    workload = "returns its inputs"
    tags = ("compute-light",)
    has_gpu = True

    def run(self, inputs):
        return dict(inputs)


class HostOnly(agentsched.Tool):
    has_gpu = False

    def run(self, inputs):
        return 1


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "apitools_mod.py").write_text(
        textwrap.dedent("""
        import agentsched

        class Good(agentsched.Tool):
            workload = "good"
            def run(self, inputs):
                return inputs

        class NoRun(agentsched.Tool):
            pass

        class Plain:
            pass

        NOT_A_CLASS = 3
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "apitools_mod"


def test_tool_is_public_and_needs_no_torch():
    code = "import sys, agentsched; agentsched.Tool; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_builtin_tools_are_public_tools():
    from agentsched.tools import get_tool

    assert isinstance(get_tool("groupby"), agentsched.Tool)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pkg.mod:Cls", True),
        ("mod:Cls.Inner", True),
        ("clip", False),
        ("clip_x12", False),
        ("pkg.mod:", False),
        (":Cls", False),
        ("a b:C", False),
    ],
)
def test_is_tool_path(text, expected):
    assert is_tool_path(text) is expected


def test_resolve_a_user_class(user_module):
    cls = resolve_tool(f"{user_module}:Good")
    assert issubclass(cls, agentsched.Tool) and cls.workload == "good"


@pytest.mark.parametrize(
    ("attr", "match"),
    [
        ("Plain", r"class Plain is not an agentsched.Tool subclass"),
        ("NOT_A_CLASS", r"int is not an agentsched.Tool subclass"),
        ("Missing", r"has no attribute 'Missing'"),
        ("NoRun", r"does not implement run\(inputs\)"),
    ],
)
def test_bad_user_classes_are_one_line_errors(user_module, attr, match):
    with pytest.raises(ToolError, match=match) as e:
        resolve_tool(f"{user_module}:{attr}")
    assert "\n" not in str(e.value)


def test_a_module_that_does_not_import():
    with pytest.raises(ToolError, match=r"no module named 'no_such_module_xyz'") as e:
        resolve_tool("no_such_module_xyz.tools:Thing")
    assert "\n" not in str(e.value)


def test_a_module_that_raises_on_import(tmp_path, monkeypatch):
    (tmp_path / "apitools_broken.py").write_text("raise RuntimeError('broken at import\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ToolError, match=r"importing apitools_broken failed: RuntimeError: broken at import$"):
        resolve_tool("apitools_broken:X")


def test_in_memory_classes_and_instances_are_registered():
    def factory():
        class Local(agentsched.Tool):
            def run(self, inputs):
                return "local"

        return Local

    local = factory()
    path = register_tool(local)
    assert is_tool_path(path) and resolve_tool(path) is local
    inst = Echo()
    ipath = register_tool(inst)
    assert new_tool(ipath) is inst  # an instance is used as given
    assert register_tool(Echo) == f"{__name__}:Echo"  # importable: named by its import path
    with pytest.raises(ToolError, match="not an agentsched.Tool"):
        register_tool(object())


def test_an_instance_in_a_workflow_is_named_by_its_class_and_task_the_same_in_every_process():
    from agentsched.model import tool as tool_mod
    from agentsched.runtime import workflow_from_tools

    first = Echo()
    path = workflow_from_tools("keyed-wf", {"R": first}).tasks["R"].tool
    assert path == f"{__name__}:Echo.keyed_wf_R" and new_tool(path) is first  # no object id in it
    assert workflow_from_tools("keyed-wf", {"R": first}).tasks["R"].tool == path  # the same instance again
    other = Echo()  # another instance under that name in this process: the first keeps its key
    other_path = workflow_from_tools("keyed-wf", {"R": other}).tasks["R"].tool
    assert other_path != path and new_tool(other_path) is other and new_tool(path) is first
    tool_mod._IN_MEMORY.pop(path)  # as in a new process: a new instance gets the first one's key back
    assert workflow_from_tools("keyed-wf", {"R": Echo()}).tasks["R"].tool == path


def test_cold_card_is_conservative_on_vram():
    path = register_tool(Echo)
    card = cold_card(path, vram_budget_mb=800)
    assert card.has_gpu and card.vram_mb == 800 and card.workload == "returns its inputs"
    assert card.tags == ("compute-light",)
    assert cold_card(path, None).vram_mb == 0
    host = cold_card(register_tool(HostOnly), 800)
    assert not host.has_gpu and host.vram_needed_mb == 0


def test_workflow_with_user_tools_marks_them_unprofiled(user_module):
    wf = parse_workflow(
        {"name": "u", "tasks": {"A": {"tool": f"{user_module}:Good"}, "B": "groupby"}, "edges": [["A", "B"]]}, "u.yaml"
    )
    assert wf.unprofiled == frozenset({"A"})
    assert wf.task_cards["A"].name == f"{user_module}:Good" and wf.task_cards["B"].name == "groupby"


def test_workflow_naming_a_bad_tool_is_a_one_line_error(user_module):
    with pytest.raises(WorkflowError, match=r"u.yaml: tool .*Plain: class Plain is not an agentsched.Tool"):
        parse_workflow({"name": "u", "tasks": {"A": {"tool": f"{user_module}:Plain"}}}, "u.yaml")


def test_workflow_from_tools_builds_a_cold_workflow():
    from agentsched.model.cards import ToolCard
    from agentsched.runtime import workflow_from_tools

    wf = workflow_from_tools("mem", {"A": Echo, "B": HostOnly()}, [("A", "B")], vram_budget_mb=500)
    assert wf.unprofiled == frozenset({"A", "B"}) and wf.sinks == ["B"]
    assert wf.task_cards["A"].vram_mb == 500
    card = ToolCard(name="x", cpu_ms=10, gpu_ms=2, vram_mb=100, load_ms=5)
    warm = workflow_from_tools("mem", {"A": Echo}, cards={"A": card})
    assert warm.unprofiled == frozenset() and warm.task_cards["A"].gpu_ms == 2
    with pytest.raises(WorkflowError, match="unknown task"):
        workflow_from_tools("mem", {"A": Echo}, [("A", "Z")])


# ---- built-in tools on the public API ----------------------------------------------------------
def test_builtin_run_without_arguments_is_the_seeded_call():
    from agentsched.tools import get_tool

    a, b = get_tool("log_analyzer", seed=3), get_tool("log_analyzer", seed=3)
    a.load("cpu")
    b.load("cpu")
    assert a.run({}) == b.call()
    assert a.run({"B": "an upstream output is not an argument it takes"}) == b.call()


def test_builtin_run_takes_named_arguments():
    pytest.importorskip("pypdf")
    pytest.importorskip("fpdf")
    from agentsched.tools import get_tool
    from agentsched.tools.inputs import apache_logs, pdf_document

    log = get_tool("log_analyzer")
    log.load("cpu")
    lines, truth = apache_logs(50, seed=1)
    out = log.run({"log": "\n".join(lines)})
    assert out["lines"] == 50 and out["malformed"] == truth.malformed
    with pytest.raises(ToolError, match="must be text"):
        log.run({"log": 3})
    pdf = get_tool("pdf_parser")
    pdf.load("cpu")
    data, written = pdf_document(1, 3, seed=2)
    text = pdf.run({"pdf": data})["text"]
    assert all(line in text for line in written)


@pytest.mark.parametrize(
    "attrs, message",
    [
        (
            {"tags": "compute-bound"},
            "tags must be a tuple of strings, not the string 'compute-bound' (write ('compute-bound',))",
        ),
        ({"input_names": "text"}, "input_names must be a tuple of strings, not the string 'text' (write ('text',))"),
        ({"tags": ("compute-bound", 3)}, "tags must be a tuple of strings, got ('compute-bound', 3)"),
        ({"workload": 5}, "workload must be a string (one line), got int"),
        ({"has_gpu": "yes"}, "has_gpu must be True or False, got 'yes'"),
        ({"concurrent_safe": 1}, "concurrent_safe must be True or False, got 1"),
    ],
)
def test_a_class_attribute_of_the_wrong_type_is_a_one_line_error(attrs, message):
    """Before, tags = "compute-bound" became the tags 'c', 'o', 'm', ... of its cold card."""
    bad = type("Bad", (Echo,), attrs)
    with pytest.raises(ToolError) as e:
        register_tool(bad)
    assert str(e.value).endswith(message) and "Bad" in str(e.value)
    with pytest.raises(ToolError, match="must be"):
        register_tool(bad())
