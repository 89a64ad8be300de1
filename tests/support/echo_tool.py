"""The source of a one-tool user module (``Echo``: returns its ``text`` input), for tests that write a
user project to a temporary folder and run the CLI on it."""

from __future__ import annotations

import textwrap

ECHO_TOOLS = textwrap.dedent("""
    import agentsched


    class Echo(agentsched.Tool):
        name = "echo"
        workload = "return the text"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            return inputs["text"]
""")
