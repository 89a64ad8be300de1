"""The ``llm`` reasoner: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server,
hosted APIs) through the official ``openai`` SDK.

Per round: build the prompt from the four streams, ask for a JSON object (``response_format``
json_object where the server supports it; plain otherwise), strip reasoning blocks such as
``<think>...</think>``, take the final JSON object, validate it (every task present, modes inside
the decision space) and, when invalid, ask again with the validation error in the conversation
(bounded). When the endpoint fails (refused, timeout, HTTP error) or the answer is still invalid,
fall back to the best-ever mapping and record why. Every prompt and raw response goes into the
proposal's ``info`` so a user can audit each decision.

Circuit breaker: a blackholed endpoint would cost ``timeout_s`` in every round of the run. After
``breaker_rounds`` (default 2) consecutive rounds in which the endpoint could not be reached (the
connection was refused or timed out), the reasoner stops calling it for the rest of the run: every
later round falls back to the best-ever mapping at once, and its audit trail says why. Any answer
(even an HTTP error or an invalid one) proves the endpoint reachable and resets the count. A
permanent error (HTTP 401/403/404/405/501, or a response that is not a chat completion) opens the
circuit at once: asking again cannot help. ``hold_open`` keeps the circuit open across runs (the
bench does this once an endpoint failed, so a dead endpoint costs one run, not every run).

``preflight`` makes one cheap request (a one-token chat completion) before any run, so that the
commands fail in one line on an unusable endpoint instead of falling back in every round.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agentsched.agent.local_llm import GGUF_SCHEME, ChatServer, require_llama_cpp, serve_gguf
from agentsched.agent.prompt import Prompt, build_prompt
from agentsched.agent.rules import Decision
from agentsched.agent.view import AgentView, MappingT
from agentsched.errors import AgentschedError, MappingError, PolicyError
from agentsched.model.mapping import format_mapping, validate_mapping
from agentsched.model.workflow import Workflow

log = logging.getLogger("agentsched.agent")

ENV_BASE_URL = "AGENTSCHED_LLM_BASE_URL"
ENV_MODEL = "AGENTSCHED_LLM_MODEL"
ENV_API_KEY = "AGENTSCHED_LLM_API_KEY"
ENV_TEMPERATURE = "AGENTSCHED_LLM_TEMPERATURE"
ENV_TIMEOUT = "AGENTSCHED_LLM_TIMEOUT_S"

_REASONING_TAGS = ("think", "thinking", "reasoning", "reflection")
# HTTP statuses that no retry can fix: bad key, forbidden, no such route or model, method, not implemented
PERMANENT_STATUSES = frozenset({401, 403, 404, 405, 501})
# statuses that still prove a usable chat endpoint in the preflight: a rejected parameter (the one-token
# request itself) or a rate limit
_PREFLIGHT_OK_STATUSES = frozenset({400, 422, 429})


class AnswerError(AgentschedError):
    """An LLM answer that is not a valid mapping (one line, fed back to the model)."""


@dataclass(frozen=True)
class LLMConfig:
    """How to reach the endpoint. Options win over environment variables, which win over defaults."""

    base_url: str  # OpenAI-compatible endpoint root, e.g. http://127.0.0.1:8000/v1 (vLLM), or gguf:/path.gguf
    model: str  # model name as the server knows it
    api_key: str = "EMPTY"  # local servers accept any key; hosted APIs need theirs
    temperature: float = 0.2  # low: placements should be reproducible
    timeout_s: float = 120.0  # per request; reasoning models can be slow
    max_retries: int = 2  # re-asks after an invalid answer (the error goes back into the conversation)
    max_tokens: int | None = None  # completion cap; None: the server's default
    json_mode: bool = True  # ask for response_format json_object (dropped when the server rejects it)
    breaker_rounds: int = 2  # stop calling after this many consecutive unreachable rounds (0: never stop)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> LLMConfig:
        env = os.environ if env is None else env
        opts = {k: v for k, v in dict(options or {}).items() if v is not None}
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(opts) - set(known))
        if unknown:
            raise PolicyError(f"unknown llm option(s) {', '.join(unknown)} (valid: {', '.join(known)})")
        source = {k: f"llm {k}" for k in known}  # where each value came from, for error messages
        for key, var in (("base_url", ENV_BASE_URL), ("model", ENV_MODEL), ("api_key", ENV_API_KEY),
                         ("temperature", ENV_TEMPERATURE), ("timeout_s", ENV_TIMEOUT)):
            if key not in opts and env.get(var):
                opts[key] = env[var]
                source[key] = var
        if not opts.get("base_url"):
            raise PolicyError(f"agent-llm needs an endpoint: --llm-base-url or {ENV_BASE_URL} "
                              "(e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama)")
        local = str(opts.get("base_url", "")).startswith(GGUF_SCHEME)
        if local:
            require_llama_cpp()  # one line when the local-llm extra is missing
            opts.setdefault("model", Path(str(opts["base_url"])[len(GGUF_SCHEME):]).stem)
        if not opts.get("model"):
            raise PolicyError(f"agent-llm needs a model name: --llm-model or {ENV_MODEL}")
        for key, conv in (("temperature", float), ("timeout_s", float), ("max_retries", int),
                          ("max_tokens", int), ("breaker_rounds", int)):
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
        for key, low in (("max_retries", 0), ("breaker_rounds", 0), ("max_tokens", 1)):
            if key in opts and opts[key] < low:
                raise PolicyError(f"llm {key} must be >= {low}, got {opts[key]}")
        if not local:
            _check_url(str(opts["base_url"]), source["base_url"])
            opts["base_url"] = str(opts["base_url"]).rstrip("/")
        return cls(**opts)

    def to_dict(self) -> dict[str, Any]:
        """For reports: everything but the key."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "api_key"}


def _check_url(url: str, where: str) -> None:
    """An http(s) URL with a host, or a one-line PolicyError."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as e:
        raise PolicyError(f"{where} is not a valid URL: {url!r} ({_one_line(e)})") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise PolicyError(f"{where} must be an http:// or https:// URL with a host "
                          f"(or {GGUF_SCHEME}/path/to/model.gguf), got {url!r}")


# ---- answer parsing ------------------------------------------------------------------------------
def strip_reasoning(text: str) -> str:
    """Drop ``<think>...</think>`` (and similar) blocks; an unmatched closing tag drops all before it;
    an unclosed opening tag drops all after it."""
    out = text
    for tag in _REASONING_TAGS:
        out = re.sub(rf"<{tag}>.*?</{tag}>", "", out, flags=re.S | re.I)
        close = re.search(rf"</{tag}>", out, flags=re.I)
        if close:  # servers that strip the opening tag
            out = out[close.end():]
        opening = re.search(rf"<{tag}>", out, flags=re.I)
        if opening:  # truncated reasoning: nothing after it is an answer
            out = out[:opening.start()]
    return out


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object embedded in ``text`` (prose, code fences and all), in order."""
    dec = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    i = 0
    while True:
        j = text.find("{", i)
        if j < 0:
            return out
        try:
            obj, end = dec.raw_decode(text, j)
        except json.JSONDecodeError:
            i = j + 1
            continue
        except RecursionError:  # e.g. '{"mapping":' + '[' * 100000: an invalid answer, not a crash
            raise AnswerError("the answer's JSON is nested too deeply") from None
        if isinstance(obj, dict):
            out.append(obj)
        i = end


def parse_answer(text: str, workflow: Workflow) -> tuple[MappingT, str]:
    """The mapping (and the model's reason) in an answer; AnswerError with a one-line reason."""
    body = strip_reasoning(text or "")
    try:
        objs = json_objects(body)
    except AnswerError:
        raise
    except (RecursionError, ValueError, MemoryError) as e:
        raise AnswerError(f"the answer cannot be parsed: {_one_line(e)}") from None
    if not objs:
        raise AnswerError("no JSON object found in the answer")
    tasks = set(workflow.task_ids)

    def holds_mapping(o: dict[str, Any]) -> bool:
        return "mapping" in o or bool(tasks & set(map(str, o)))

    obj = next((o for o in reversed(objs) if holds_mapping(o)), objs[-1])
    raw = obj.get("mapping", obj)
    if not isinstance(raw, dict):
        raise AnswerError(f'"mapping" must be an object of task -> mode, got {type(raw).__name__}')
    reason = str(obj.get("reason", "")) if "mapping" in obj else ""
    pairs = {str(k).strip(): v for k, v in raw.items() if k != "reason"}
    bad = next((t for t, v in pairs.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise AnswerError(f"task {bad}: mode must be a string, got {json.dumps(pairs[bad])}")
    try:
        return validate_mapping(workflow, pairs), reason  # every task, modes inside the decision space
    except MappingError as e:
        raise AnswerError(str(e)) from None


# ---- the reasoner --------------------------------------------------------------------------------
class LLMReasoner:
    """Asks an OpenAI-compatible endpoint for each round's mapping."""

    name = "llm"

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self._client: Any = None
        self._json_mode = config.json_mode  # switched off for good once the server rejects it
        self._local: ChatServer | None = None  # the local GGUF server behind a gguf: base URL
        self._unreachable_rounds = 0  # consecutive rounds whose requests could not reach the endpoint
        self._open: str | None = None  # why the circuit is open (no more requests this run), or None
        self._held: str | None = None  # why the circuit stays open across runs (hold_open), or None

    def reset(self) -> None:
        """A new run: close the circuit (the endpoint gets another chance), unless it is held open."""
        self._unreachable_rounds = 0
        self._open = self._held

    @property
    def circuit_open(self) -> bool:
        """True once the endpoint was unreachable in ``breaker_rounds`` consecutive rounds of this run,
        answered a permanent error, or the circuit is held open."""
        return self._open is not None

    @property
    def open_reason(self) -> str | None:
        """Why the circuit is open, or None."""
        return self._open

    def hold_open(self, reason: str) -> None:
        """Keep the circuit open for this run and every later one (no request at all)."""
        self._held = reason
        self._open = reason

    def preflight(self) -> None:
        """One cheap request (a one-token chat completion, the configured timeout, no retry); a
        one-line PolicyError ``LLM endpoint <url> is not usable: <reason>`` when it fails."""
        import openai

        url = self.config.base_url

        def unusable(reason: str) -> PolicyError:
            return PolicyError(f"LLM endpoint {url} is not usable: {reason}")

        try:
            resp = self.client().chat.completions.create(
                model=self.config.model, messages=[{"role": "user", "content": "Reply with OK."}],
                max_tokens=1, temperature=0)
        except openai.APITimeoutError:
            raise unusable(f"no answer within {self.config.timeout_s:g} s") from None
        except openai.APIConnectionError as e:
            raise unusable(_connection_reason(e)) from None
        except openai.APIStatusError as e:
            if e.status_code in _PREFLIGHT_OK_STATUSES:
                return  # the chat route answered; it only disliked the one-token request, or is busy
            raise unusable(f"HTTP {e.status_code}: {_one_line(e)}") from None
        except openai.OpenAIError as e:
            raise unusable(f"the answer is not a chat completion ({_one_line(e)})") from None
        except AgentschedError as e:  # e.g. a gguf: model that cannot be served
            raise unusable(_one_line(e)) from None
        if not isinstance(getattr(resp, "choices", None), list):
            raise unusable("the answer is not a chat completion")

    def client(self) -> Any:
        if self._client is None:
            import openai

            base_url = self.config.base_url
            if base_url.startswith(GGUF_SCHEME):  # a local GGUF model: serve it on the loopback first
                self._local = serve_gguf(base_url[len(GGUF_SCHEME):])
                base_url = self._local.base_url
            self._client = openai.OpenAI(base_url=base_url, api_key=self.config.api_key,
                                         timeout=self.config.timeout_s, max_retries=0)
        return self._client

    def close(self) -> None:
        """Stop the local model server, if one was started."""
        if self._local is not None:
            self._local.close()
            self._local = None

    def _complete(self, messages: list[dict[str, str]], attempt: dict[str, Any]) -> str:
        """One chat completion; raises openai errors for the caller to classify."""
        import openai

        kwargs: dict[str, Any] = {"model": self.config.model, "messages": messages,
                                  "temperature": self.config.temperature}
        if self.config.max_tokens is not None:
            kwargs["max_tokens"] = self.config.max_tokens
        if self._json_mode:
            try:
                resp = self.client().chat.completions.create(**kwargs, response_format={"type": "json_object"})
            except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
                # the server does not support structured output: ask again in plain mode
                self._json_mode = False
                attempt["json_mode_rejected"] = _one_line(e)
                resp = self.client().chat.completions.create(**kwargs)
        else:
            resp = self.client().chat.completions.create(**kwargs)
        attempt["json_mode"] = self._json_mode
        if not getattr(resp, "choices", None):
            raise AnswerError("the response has no choices")
        msg = resp.choices[0].message
        reasoning = getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None)
        if reasoning:
            attempt["reasoning"] = str(reasoning)
        return msg.content or ""

    def propose(self, view: AgentView, fallback: Decision) -> tuple[MappingT, dict[str, Any]]:
        """The mapping for ``view.round`` and the audit record (prompt, every response, fallback)."""
        import openai

        wf = view.workflow
        prompt: Prompt = build_prompt(view)
        messages = prompt.messages()
        # "response" is the audit trail: one record per request (its raw content, or why it failed),
        # and a last record naming the fallback when there was one
        attempts: list[dict[str, Any]] = []
        info: dict[str, Any] = {"reasoner": "llm", "model": self.config.model, "prompt_version": prompt.version,
                                "prompt": prompt.text(), "response": attempts, "fallback": None}
        if self._open is not None:  # the circuit is open: no request, straight to the fallback
            info["circuit_open"] = self._open
            return self._fall_back(view, fallback, info, f"endpoint not called: {self._open}", quiet=True)
        why = ""
        unreachable = False  # the round's requests all failed to connect or timed out
        permanent = False  # an error that no later request can fix
        for n in range(1 + self.config.max_retries):
            attempt: dict[str, Any] = {"attempt": n + 1}
            attempts.append(attempt)
            try:
                text = self._complete(messages, attempt)
            except openai.APITimeoutError:
                why = f"endpoint timed out after {self.config.timeout_s:g} s"
                attempt["error"] = why
                unreachable = True
                break
            except openai.APIConnectionError as e:
                why = f"endpoint unreachable at {self.config.base_url}: {_one_line(e)}"
                attempt["error"] = why
                unreachable = True
                break
            except openai.APIStatusError as e:
                why = f"endpoint answered HTTP {e.status_code}: {_one_line(e)}"
                attempt["error"] = why
                permanent = e.status_code in PERMANENT_STATUSES
                break
            except (openai.OpenAIError, AnswerError) as e:
                why = f"unusable response: {_one_line(e)}"
                attempt["error"] = why
                permanent = True  # not a chat completion: asking again gets the same
                break
            attempt["content"] = text
            try:
                mapping, reason = parse_answer(text, wf)
            except Exception as e:  # noqa: BLE001 - whatever the parser raises, the answer is invalid
                if not isinstance(e, AnswerError):
                    e = AnswerError(f"the answer cannot be parsed: {type(e).__name__}: {_one_line(e)}")
                why = f"invalid answer after {n + 1} attempt(s): {e}"
                attempt["error"] = str(e)
                sp = wf.decision_space
                messages = [*messages, {"role": "assistant", "content": text},
                            {"role": "user", "content": (
                                f"Your answer is not valid: {e}. Reply again with one JSON object "
                                f'{{"mapping": {{...}}, "reason": "..."}} that gives every task '
                                f"({', '.join(wf.task_ids)}) one of the modes "
                                f"{', '.join(sp.label(m) for m in sp.modes)}.")}]
                continue
            attempt["ok"] = True
            self._unreachable_rounds = 0
            info.update(reason=reason, mapping=format_mapping(wf, mapping))
            return mapping, info
        self._unreachable_rounds = self._unreachable_rounds + 1 if unreachable else 0
        limit = self.config.breaker_rounds
        if permanent and limit:
            self._open = f"circuit open after a permanent error ({why}); no more requests this run"
            info["circuit_open"] = self._open
            log.warning("agent-llm round %d: %s", view.round, self._open)
        elif unreachable and limit and self._unreachable_rounds >= limit:
            self._open = (f"circuit open after {self._unreachable_rounds} consecutive rounds without reaching "
                          f"the endpoint (last: {why}); no more requests this run")
            info["circuit_open"] = self._open
            log.warning("agent-llm round %d: %s", view.round, self._open)
        return self._fall_back(view, fallback, info, why)

    def _fall_back(self, view: AgentView, fallback: Decision, info: dict[str, Any], why: str,
                   quiet: bool = False) -> tuple[MappingT, dict[str, Any]]:
        """Use ``fallback`` for this round and record why in the audit trail."""
        wf = view.workflow
        info["fallback"] = f"{why}; falling back to {fallback.reason}"
        info["response"].append({"fallback": info["fallback"], "mapping": format_mapping(wf, fallback.mapping)})
        info.update(reason=info["fallback"], mapping=format_mapping(wf, fallback.mapping))
        (log.info if quiet else log.warning)("agent-llm round %d: %s", view.round, info["fallback"])
        return dict(fallback.mapping), info


def _connection_reason(e: BaseException) -> str:
    """'connection refused' and the like, from the error chain of an openai connection error."""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        nxt = cause.__cause__ or cause.__context__
        if nxt is None:
            break
        cause = nxt
    return _one_line(cause if cause is not None and str(cause).strip() else e)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
