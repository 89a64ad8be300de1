"""Structured output in each server's dialect: the links of the chain, what each puts in the request,
which chain a server gets, how a server is recognised and how it rejects a link.

The placement schema (every task a required property, each an enum of the decision space's modes)
makes answers such as ``{}`` or a copied ``<task>`` placeholder invalid by construction, and lets a
server constrain decoding so that even a tiny model keeps the JSON contract. Servers take it in
different places:

* ``json_schema``: ``response_format: {"type": "json_schema", "json_schema": {..., "schema": S}}``
  (OpenAI, vLLM, llama.cpp's ``llama-server``, Ollama >= 0.5);
* ``json_object+schema``: ``response_format: {"type": "json_object", "schema": S}`` (llama.cpp's
  server and llama-cpp-python's, which refuses ``json_schema`` with an HTTP 500);
* ``guided_json``: a top-level ``guided_json: S`` (vLLM's own field; older vLLM without ``json_schema``);
* ``format``: a top-level ``format: S`` (Ollama's own field);
* ``json_object``: JSON without a schema; ``plain``: nothing.

A run starts at ``json_schema`` (or the configured link) and moves down its server's chain each time
the server rejects a link; the server's kind is learned (``GET /models``) only when the first link is
rejected, since only then does it matter which comes next.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from agentsched.model.workflow import Workflow

#: every link, strongest first
LINKS = ("json_schema", "json_object+schema", "guided_json", "format", "json_object", "plain")
#: the servers whose dialect is known; auto: learned from the endpoint
SERVERS = ("auto", "generic", "openai", "vllm", "ollama", "llama.cpp", "llama-cpp-python")
_CHAINS: dict[str, tuple[str, ...]] = {
    "generic": ("json_schema", "json_object+schema", "json_object", "plain"),
    "openai": ("json_schema", "json_object", "plain"),
    "llama.cpp": ("json_schema", "json_object+schema", "json_object", "plain"),
    # measured: llama-cpp-python 0.3.x refuses json_schema (HTTP 500) and honours json_object + schema
    "llama-cpp-python": ("json_object+schema", "json_object", "plain"),
    # vLLM and Ollama accept an unknown key inside json_object silently (no constraint): their own fields
    "vllm": ("json_schema", "guided_json", "json_object", "plain"),
    "ollama": ("json_schema", "format", "json_object", "plain"),
}
#: statuses with which a server rejects a request's structured-output fields
_REJECT_STATUSES = frozenset({400, 422})
#: words in a 5xx message that say the structured-output fields were the problem (llama.cpp: a bad
#: grammar; llama-cpp-python: a validation error of response_format)
_REJECT_WORDS = ("response_format", "json_schema", "json_object", "guided_json", "schema", "grammar")
OLLAMA_PORT = 11434


def chain(server: str, start: str = "json_schema") -> list[str]:
    """The links a ``server`` (one of SERVERS) gets, from ``start`` on (or its first link below ``start``)."""
    if server == "auto":  # a start that only one server takes implies that server
        server = {"guided_json": "vllm", "format": "ollama"}.get(start, "generic")
    links = _CHAINS[server]
    floor = LINKS.index(start)
    return [link for link in links if LINKS.index(link) >= floor] or ["plain"]


def placement_schema(workflow: Workflow) -> dict[str, Any]:
    """The JSON schema of an answer for ``workflow``: a ``mapping`` that names every task (required
    properties) with one of the decision space's modes (enum), and a one-sentence ``reason``."""
    sp = workflow.decision_space
    modes = [sp.label(m) for m in sp.modes]
    mapping = {
        "type": "object",
        "properties": {t: {"type": "string", "enum": modes} for t in workflow.task_ids},
        "required": list(workflow.task_ids),
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"mapping": mapping, "reason": {"type": "string"}},
        "required": ["mapping", "reason"],
        "additionalProperties": False,
    }


def response_schema(workflow: Workflow) -> dict[str, Any]:
    """The ``response_format`` of type ``json_schema`` for ``workflow``."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "placement", "strict": True, "schema": placement_schema(workflow)},
    }


def request_fields(link: str, workflow: Workflow) -> dict[str, Any]:
    """The request body's fields for one link of the chain ({} for plain)."""
    if link == "json_schema":
        return {"response_format": response_schema(workflow)}
    if link == "json_object+schema":
        return {"response_format": {"type": "json_object", "schema": placement_schema(workflow)}}
    if link == "guided_json":
        return {"guided_json": placement_schema(workflow)}
    if link == "format":
        return {"format": placement_schema(workflow)}
    if link == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


def rejects_link(status: int, message: str) -> bool:
    """An HTTP error that refuses the request's structured-output fields (not the request as such)."""
    text = message.lower()
    return status in _REJECT_STATUSES or (status >= 500 and any(w in text for w in _REJECT_WORDS))


def identify(models: Any, base_url: str) -> str:
    """The server's kind from its ``GET /models`` answer (each server names itself in ``owned_by``)
    and, for Ollama, its default port; ``generic`` when unknown."""
    data = models.get("data") if isinstance(models, Mapping) else None
    owners = (
        {str(m.get("owned_by", "")).lower() for m in data if isinstance(m, Mapping)}
        if isinstance(data, list)
        else set()
    )
    if "vllm" in owners:
        return "vllm"
    if "llamacpp" in owners:
        return "llama.cpp"
    if "me" in owners:  # llama-cpp-python's server
        return "llama-cpp-python"
    try:
        port = urllib.parse.urlsplit(base_url).port
    except ValueError:
        port = None
    if owners & {"library", "ollama"} or port == OLLAMA_PORT:
        return "ollama"
    if owners & {"openai", "system", "openai-internal"}:
        return "openai"
    return "generic"
