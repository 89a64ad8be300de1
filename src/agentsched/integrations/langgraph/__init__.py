"""agentsched places the tool nodes of a LangGraph graph (optional extra ``[langgraph]``).

    from agentsched.integrations.langgraph import tool_node, placeable, GraphRuntime

    g = StateGraph(State)
    g.add_node("embed", tool_node(Embed))          # an agentsched.Tool as a node
    g.add_node("llm", call_llm)                     # a host node: runs as it is
    ...
    with GraphRuntime(g, name="rag", store="agentsched.db") as rt:
        result = rt.invoke({"documents": [...], "question": "..."})

See docs/langgraph.md for what is and is not supported.
"""

from __future__ import annotations

from agentsched.errors import AgentschedError


class MissingExtraError(AgentschedError, ImportError):
    """LangGraph is not installed."""


try:
    import langgraph.graph  # noqa: F401 - the extra's presence check
except ImportError:
    raise MissingExtraError(
        "agentsched.integrations.langgraph needs LangGraph >= 1.0: pip install 'agentsched[langgraph]'"
    ) from None

from agentsched.integrations.langgraph.gate import Gate, Infeasible  # noqa: E402
from agentsched.integrations.langgraph.graph import GraphError, GraphSpec, inspect_graph  # noqa: E402
from agentsched.integrations.langgraph.nodes import (  # noqa: E402
    FunctionNode,
    NodeError,
    PlaceableNode,
    ToolNode,
    placeable,
    tool_node,
)
from agentsched.integrations.langgraph.runtime import (  # noqa: E402
    GraphInputError,
    GraphResult,
    GraphRuntime,
    workflow_from_graph,
)
from agentsched.integrations.langgraph.testbed import LangGraphTestbed  # noqa: E402

__all__ = [
    "FunctionNode",
    "Gate",
    "GraphError",
    "GraphInputError",
    "GraphResult",
    "GraphRuntime",
    "GraphSpec",
    "Infeasible",
    "LangGraphTestbed",
    "MissingExtraError",
    "NodeError",
    "PlaceableNode",
    "ToolNode",
    "inspect_graph",
    "placeable",
    "tool_node",
    "workflow_from_graph",
]
