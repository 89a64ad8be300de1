"""A user's project written outside the package: one tool module and workflow files, in a temporary
folder, as a new user would write them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

TOOLS = textwrap.dedent('''
    """Word tools of a user's project."""
    import time

    import agentsched


    class Split(agentsched.Tool):
        name = "split"
        workload = "split a text into words"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            if inputs["text"] == "boom":
                raise ValueError("cannot split boom\\nsecond line")
            return inputs["text"].split()


    class Count(agentsched.Tool):
        name = "count"
        workload = "count words"
        tags = ("compute-light",)
        has_gpu = False

        def run(self, inputs):
            time.sleep(0.002)
            return len(inputs["A"])


    class Shout(agentsched.Tool):
        name = "shout"
        workload = "upper-case the words, joined"
        tags = ("compute-bound",)
        has_gpu = False

        def load(self, device):
            self.device = device

        def run(self, inputs):
            return " ".join(w.upper() for w in inputs["A"])

        def unload(self):
            self.device = None

        def example_inputs(self):
            return {"A": ["a", "few", "words"]}


    class Opaque(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            return object()


    class Plain:
        """Not a Tool."""
''')

WORDS = textwrap.dedent("""
    name: words
    decision_space: three_way
    tasks:
      A: {tool: "wordtools:Split"}
      B: {tool: "wordtools:Count"}
      C: {tool: "wordtools:Shout"}
    edges: [[A, B], [A, C]]
""")


def write_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "wordtools.py").write_text(TOOLS)
    (root / "words.yaml").write_text(WORDS)
    for name, tool in (
        ("opaque", "wordtools:Opaque"),
        ("plain", "wordtools:Plain"),
        ("missing", "nowhere_pkg.tools:Thing"),
    ):
        (root / f"{name}.yaml").write_text(f'name: {name}\ntasks:\n  A: {{tool: "{tool}"}}\n')
    return root


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    """The user's folder (outside the package), written once per session."""
    return write_project(tmp_path_factory.mktemp("user-project"))


@pytest.fixture
def on_path(project, monkeypatch) -> Path:
    """The project importable in this process (as from its folder)."""
    monkeypatch.syspath_prepend(str(project))
    return project
