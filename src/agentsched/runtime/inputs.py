"""What an invocation may be given: the inputs its source tasks take."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentsched.errors import ToolError
from agentsched.model.tool import is_tool_path, tool_class
from agentsched.model.workflow import Workflow


def _source_user_tools(wf: Workflow) -> Iterator[tuple[str, type]]:
    """(task, tool class) of each source task run by a user tool (built-in ones take no inputs)."""
    for t in wf.task_ids:
        if not wf.preds[t] and is_tool_path(wf.tasks[t].tool):
            yield t, tool_class(wf.tasks[t].tool)


def check_input_names(wf: Workflow, inputs: dict[str, Any]) -> None:
    """Refuse an input no source task takes (a misspelt name would otherwise be dropped silently).
    Built-in source tools take none; a user tool without ``input_names`` takes every input."""
    takes: set[str] = set()
    for _, cls in _source_user_tools(wf):
        if not cls.input_names:
            return
        takes.update(cls.input_names)
    unknown = [n for n in inputs if n not in takes]
    if unknown:
        given = ", ".join(sorted(takes)) or "none"
        raise ToolError(
            f"invocation input {unknown[0]!r} is not an input of workflow {wf.name} (its source tasks take: {given})"
        )


CALLER_HINT = "give them as invoke(NAME=VALUE) / --input NAME=VALUE"
HTTP_HINT = 'send them in the request body: {"inputs": {"NAME": VALUE}}'


def check_inputs_given(wf: Workflow, inputs: dict[str, Any], hint: str = CALLER_HINT) -> None:
    """Refuse an invocation missing an input a source task's user tool takes (built-in tools compute
    on generated inputs); ``hint`` says how the caller gives them."""
    for t, cls in _source_user_tools(wf):
        missing = [n for n in cls.input_names if n not in inputs]
        if not inputs or missing:
            need = ", ".join(missing or cls.input_names) or "its arguments"
            raise ToolError(f"invocation is missing input(s) for source task {t} ({wf.tasks[t].tool}): {need} ({hint})")


def check_needs_no_inputs(wf: Workflow, command: str) -> None:
    """A one-line ``ToolError`` for a workflow a command gives no inputs to (``run``) whose source
    user tool names inputs it takes: its executions fail unless the tool does without them (the
    command says so as a note)."""
    for t, cls in _source_user_tools(wf):
        if cls.input_names:
            raise ToolError(
                f"{command} gives a workflow no inputs, but source task {t} ({wf.tasks[t].tool}) takes "
                f"{', '.join(cls.input_names)}: use agentsched invoke --input NAME=VALUE (or "
                "--inputs-jsonl FILE)"
            )
