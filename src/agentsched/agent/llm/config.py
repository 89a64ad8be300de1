"""How the ``llm`` reasoner reaches its endpoint: ``LLMConfig`` from options and environment variables."""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agentsched.agent.llm.dialects import LINKS, SERVERS
from agentsched.agent.local_llm import GGUF_SCHEME, require_llama_cpp
from agentsched.agent.secrets import redact, url_secrets
from agentsched.errors import PolicyError
from agentsched.masking import MASK, redact_url

ENV_BASE_URL = "AGENTSCHED_LLM_BASE_URL"
ENV_MODEL = "AGENTSCHED_LLM_MODEL"
ENV_API_KEY = "AGENTSCHED_LLM_API_KEY"
ENV_TEMPERATURE = "AGENTSCHED_LLM_TEMPERATURE"
ENV_TIMEOUT = "AGENTSCHED_LLM_TIMEOUT_S"
ENV_MAX_TOKENS = "AGENTSCHED_LLM_MAX_TOKENS"

#: the completion cap sent with every request: a valid answer is ~40 tokens, and a server left to its
#: own default may generate up to its context (8,192 tokens: minutes of CPU and gigabytes of memory)
DEFAULT_MAX_TOKENS = 512
#: the most bytes of one response that are read; a chat completion with 512 tokens is a few KiB
DEFAULT_MAX_RESPONSE_BYTES = 1 << 20

_ENV = (
    ("base_url", ENV_BASE_URL),
    ("model", ENV_MODEL),
    ("api_key", ENV_API_KEY),
    ("temperature", ENV_TEMPERATURE),
    ("timeout_s", ENV_TIMEOUT),
    ("max_tokens", ENV_MAX_TOKENS),
)
_NUMBERS = (
    ("temperature", float),
    ("timeout_s", float),
    ("max_retries", int),
    ("max_tokens", int),
    ("breaker_rounds", int),
    ("preflight_retries", int),
    ("backoff_s", float),
    ("notice_after_s", float),
    ("max_response_bytes", int),
)
_STRINGS = ("base_url", "model", "api_key", "response_format", "server")
_LOWER_BOUNDS = (
    ("max_retries", 0),
    ("breaker_rounds", 0),
    ("max_tokens", 1),
    ("preflight_retries", 0),
    ("max_response_bytes", 1024),
)


@dataclass(frozen=True)
class LLMConfig:
    """How to reach the endpoint. Options win over environment variables, which win over defaults."""

    base_url: str  # OpenAI-compatible endpoint root, e.g. http://127.0.0.1:8000/v1 (vLLM), or gguf:/path.gguf
    model: str  # model name as the server knows it
    api_key: str = "EMPTY"  # local servers accept any key; hosted APIs need theirs
    temperature: float = 0.2  # low: placements should be reproducible
    timeout_s: float = 120.0  # whole-request deadline (connect, send, wait, read); reasoning models can be slow
    max_retries: int = 2  # re-asks after an invalid answer (the error goes back into the conversation)
    max_tokens: int = DEFAULT_MAX_TOKENS  # completion cap, sent with every request
    response_format: str = "json_schema"  # start of the structured-output chain (dialects.LINKS)
    server: str = "auto"  # the server's dialect (dialects.SERVERS); auto: learned from its rejections
    breaker_rounds: int = 2  # stop calling after this many consecutive unreachable rounds (0: never stop)
    preflight_retries: int = 3  # preflight: re-tries after an HTTP 5xx, with exponential backoff
    backoff_s: float = 1.0  # preflight: first backoff; doubles at each retry
    notice_after_s: float = 5.0  # print a "waiting for the LLM endpoint" line after this long (0: never)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # a longer response is an unusable answer

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any] | None,
        env: Mapping[str, str] | None = None,
        *,
        names: Mapping[str, str] | None = None,
    ) -> LLMConfig:
        """``names``: what to call a given option in errors (the CLI passes its flags, e.g.
        ``--llm-temperature``); default ``llm <field>``."""
        env = os.environ if env is None else env
        opts = {k: v for k, v in dict(options or {}).items() if v is not None}
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(opts) - set(known))
        if unknown:
            raise PolicyError(f"unknown llm option(s) {', '.join(unknown)} (valid: {', '.join(known)})")
        source = {k: (names or {}).get(k, f"llm {k}") for k in known}  # where each value came from, for errors
        for key, var in _ENV:
            if key not in opts and env.get(var):
                opts[key] = env[var]
                source[key] = var
        try:
            return cls._checked(opts, source)
        except PolicyError as e:  # why: a check may quote another value that holds the key (a URL's query)
            raise PolicyError(redact(str(e), _given_secrets(opts))) from None

    @classmethod
    def _checked(cls, opts: dict[str, Any], source: dict[str, str]) -> LLMConfig:
        """The config of ``opts`` (options and environment merged), each value checked."""
        _check_strings(opts, source)
        if not opts.get("base_url"):
            raise PolicyError(
                f"agent-llm needs an endpoint: --llm-base-url or {ENV_BASE_URL} "
                "(e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama)"
            )
        local = str(opts.get("base_url", "")).startswith(GGUF_SCHEME)
        if local:
            require_llama_cpp()  # one line when the local-llm extra is missing
            opts.setdefault("model", Path(str(opts["base_url"])[len(GGUF_SCHEME) :]).stem)
        if not opts.get("model"):
            raise PolicyError(f"agent-llm needs a model name: --llm-model or {ENV_MODEL}")
        _check_numbers(opts, source)
        for key, valid in (("response_format", LINKS), ("server", SERVERS)):
            if key in opts and opts[key] not in valid:
                raise PolicyError(f"llm {key} must be one of {', '.join(valid)}, got {opts[key]!r}")
        if not local:
            _check_url(str(opts["base_url"]), source["base_url"])
            opts["base_url"] = str(opts["base_url"]).rstrip("/")
        return cls(**opts)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What ``redact`` must mask: the API key and the base URL's credentials (and their Basic token)."""
        return (self.api_key, *url_secrets(self.base_url))

    @property
    def safe_url(self) -> str:
        """The base URL with its credentials masked (``http://***@host/v1``), and its fragment (never
        sent; a trial put a key there), for every message. Not the API key by value: a placeholder
        key may be the host's name (``ollama``), and the report must still say which endpoint."""
        head, _, fragment = redact_url(self.base_url).partition("#")
        return head + (f"#{MASK}" if fragment else "")

    def to_dict(self) -> dict[str, Any]:
        """For reports: everything but the key; the base URL without its credentials."""
        return {
            f.name: (self.safe_url if f.name == "base_url" else getattr(self, f.name))
            for f in fields(self)
            if f.name != "api_key"
        }


def _given_secrets(opts: Mapping[str, Any]) -> tuple[str, ...]:
    """The API key and the base URL's credentials among ``opts``, whatever their types."""
    key, url = opts.get("api_key"), opts.get("base_url")
    return ((key,) if isinstance(key, str) else ()) + (url_secrets(url) if isinstance(url, str) else ())


def _check_strings(opts: dict[str, Any], source: dict[str, str]) -> None:
    """The text options are text (``{"api_key": 12345678}`` from a JSON option, a model given as a
    list): one-line PolicyError naming the source, never the value of the key."""
    for key in _STRINGS:
        if key in opts and not isinstance(opts[key], str):
            shown = type(opts[key]).__name__ if key == "api_key" else repr(opts[key])
            raise PolicyError(redact(f"{source[key]} must be a string, got {shown}"))


def _check_numbers(opts: dict[str, Any], source: dict[str, str]) -> None:
    """Convert and range-check the numeric options in place; one-line PolicyError naming the source."""
    for key, conv in _NUMBERS:
        if key in opts:
            try:
                opts[key] = conv(opts[key])
            except (TypeError, ValueError, OverflowError):
                kind = "a number" if conv is float else "an integer"
                raise PolicyError(f"{source[key]} must be {kind}, got {opts[key]!r}") from None
    t = opts.get("temperature")
    if t is not None and not (math.isfinite(t) and t >= 0):
        raise PolicyError(f"{source['temperature']} must be a finite number >= 0, got {t:g}")
    s = opts.get("timeout_s")
    if s is not None and not (math.isfinite(s) and s > 0):
        raise PolicyError(f"{source['timeout_s']} must be a finite number > 0, got {s:g}")
    for key, low in _LOWER_BOUNDS:
        if key in opts and opts[key] < low:
            raise PolicyError(f"{source[key]} must be >= {low}, got {opts[key]}")
    for key in ("backoff_s", "notice_after_s"):
        if key in opts and not (math.isfinite(opts[key]) and opts[key] >= 0):
            raise PolicyError(f"llm {key} must be a finite number >= 0, got {opts[key]:g}")


def _check_url(url: str, where: str) -> None:
    """An http(s) URL with a host, or a one-line PolicyError."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as e:
        raise PolicyError(redact(f"{where} is not a valid URL: {url!r} ({one_line(e)})", url_secrets(url))) from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise PolicyError(
            redact(
                f"{where} must be an http:// or https:// URL with a host "
                f"(or {GGUF_SCHEME}/path/to/model.gguf), got {url!r}",
                url_secrets(url),
            )
        )


def one_line(e: BaseException) -> str:
    """The first line of an exception's text (at most 300 characters), or its type's name."""
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
