"""A workflow YAML too large for the caps is refused from its shape, before it is built.

Building a YAML document costs far more than its bytes (a 15 MB file of 650,000 tasks took 44 s and
1.5 GB to be refused by the task cap). The C parser's event stream is read instead, keeping
nothing, and counting stops at the most events a workflow within the caps can have.
"""

from __future__ import annotations

import yaml

_Parser: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def max_workflow_events(max_tasks: int, max_edges: int) -> int:
    """Parser events of the largest workflow within the caps: a task ``{tool: x, repeat: k}`` is 7
    (key, mapping start, 4 scalars, end), an edge ``[a, b]`` 4; the other keys fit in the slack."""
    return 8 * max_tasks + 4 * max_edges + 1_000


def yaml_too_large(text: str, max_tasks: int, max_edges: int) -> str | None:
    """Why ``text`` is too large for a workflow (one line), or None. A syntax error is left for the
    real parse to report."""
    limit = max_workflow_events(max_tasks, max_edges)
    n = 0
    try:
        for _ in yaml.parse(text, Loader=_Parser):
            n += 1
            if n > limit:
                return (
                    f"too large for a workflow: more than {limit:,} YAML nodes "
                    f"(at most {max_tasks:,} tasks and {max_edges:,} edges)"
                )
    except yaml.YAMLError:
        return None
    return None
