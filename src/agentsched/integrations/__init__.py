"""Adapters that let agentsched place the tool calls of workflows written in agent frameworks.

Each adapter is an optional extra, imported only when used (``agentsched.integrations.langgraph``
needs ``pip install 'agentsched[langgraph]'``)."""
