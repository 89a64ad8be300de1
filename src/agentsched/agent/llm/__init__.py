"""The ``llm`` reasoner: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server,
llama-cpp-python, hosted APIs), spoken to over HTTP with a whole-request deadline.

Per round: build the prompt from the four streams, ask for structured output in the server's
dialect (``dialects``), strip reasoning blocks such as ``<think>...</think>``, take the final JSON
object, validate it (``parse``) and, when invalid, ask again with the validation error in the
conversation (bounded). When the endpoint fails (refused, past the deadline, HTTP error, an answer
that is not JSON, too large or cut at the completion cap) or the answer is still invalid,
``propose`` raises ``NoDecision`` with the audit trail; the agent wraps this reasoner in a
``FallbackReasoner`` that then asks the rules reasoner for that round (agent/reasoner.py).

Circuit breaker: after ``breaker_rounds`` consecutive rounds in which the endpoint could not be
reached, or at once after a permanent error (HTTP 401/403/404/405/501, or an answer that is not a
chat completion), the reasoner stops calling it; an open circuit stays open in later runs of the
same reasoner. ``preflight`` makes one one-token request before any run.

Secrets: every message, log line, audit record (answers included: a server may echo the key) and
exception text is passed through ``agent.secrets.redact`` with the API key and the URL's
credentials (and their Basic-auth token).

Modules: ``config`` (``LLMConfig``), ``client`` (HTTP), ``dialects`` (structured output),
``parse`` (answers), ``reasoner`` (``LLMReasoner``).
"""

from agentsched.agent.llm.config import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_TOKENS,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MAX_TOKENS,
    ENV_MODEL,
    ENV_TEMPERATURE,
    ENV_TIMEOUT,
    LLMConfig,
)
from agentsched.agent.llm.dialects import LINKS, SERVERS, placement_schema, response_schema
from agentsched.agent.llm.parse import AnswerError, json_objects, parse_answer, strip_reasoning
from agentsched.agent.llm.reasoner import PERMANENT_STATUSES, LLMReasoner

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_TOKENS",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MAX_TOKENS",
    "ENV_MODEL",
    "ENV_TEMPERATURE",
    "ENV_TIMEOUT",
    "LINKS",
    "PERMANENT_STATUSES",
    "SERVERS",
    "AnswerError",
    "LLMConfig",
    "LLMReasoner",
    "json_objects",
    "parse_answer",
    "placement_schema",
    "response_schema",
    "strip_reasoning",
]
