"""The ``llm`` reasoner: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server,
hosted APIs) through the official ``openai`` SDK.

Per round: build the prompt from the four streams, ask for structured output, strip reasoning
blocks such as ``<think>...</think>``, take the final JSON object, validate it (every task present,
modes inside the decision space) and, when invalid, ask again with the validation error in the
conversation (bounded). When the endpoint fails (refused, timeout, HTTP error) or the answer is still
invalid, ``propose`` raises ``NoDecision`` with the audit trail; the agent wraps this reasoner in a
``FallbackReasoner`` that then asks the rules reasoner for that round (agent/reasoner.py). Every
prompt and raw response goes into the decision's audit so a user can audit each decision.

Structured output, a chain remembered per run: ``response_format`` of type ``json_schema`` (the
task ids as required properties, the decision space's modes as enum values: vLLM, llama.cpp's
server and OpenAI accept it, and it makes answers such as ``{}`` or a copied ``<task>`` placeholder
invalid by construction); when the server rejects it (HTTP 400/422, or an error naming
response_format), ``json_object``; then plain.

Circuit breaker: a blackholed endpoint would cost ``timeout_s`` in every round. After
``breaker_rounds`` (default 2) consecutive rounds in which the endpoint could not be reached (the
connection was refused or timed out), the reasoner stops calling it: every later round falls back
at once, and its audit trail says why. Any answer (even an HTTP error or an invalid one) proves the
endpoint reachable and resets the count. A permanent error (HTTP 401/403/404/405/501, or a response
that is not a chat completion) opens the circuit at once: asking again cannot help. An open circuit
stays open in later runs of the same reasoner (the bench runs one policy many times: a dead
endpoint costs one run, not every run).

``preflight`` makes one cheap request (a one-token chat completion) before any run, so that the
commands fail in one line on an unusable endpoint instead of falling back in every round; an HTTP
5xx there is retried with exponential backoff (``preflight_retries`` times) first. A request that
takes longer than ``notice_after_s`` prints one ``waiting for the LLM endpoint ...`` line to stderr.

Secrets: every message, log line, audit record and exception text is passed through
``agent.secrets.redact`` with the API key and the URL's credentials.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agentsched.agent.local_llm import GGUF_SCHEME, ChatServer, require_llama_cpp, serve_gguf
from agentsched.agent.prompt import Prompt, build_prompt
from agentsched.agent.reasoner import Decision, NoDecision, Reasoner
from agentsched.agent.secrets import redact, redact_url, url_secrets
from agentsched.agent.view import AgentView, MappingT
from agentsched.errors import AgentschedError, MappingError, PolicyError
from agentsched.model.mapping import validate_mapping
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
#: the structured-output chain, strongest first; a run starts at the configured one and moves right
#: each time the server rejects one
RESPONSE_FORMATS = ("json_schema", "json_object", "plain")
#: statuses with which a server rejects a response_format it does not support
_FORMAT_REJECT_STATUSES = frozenset({400, 422})


_PLACEHOLDER = re.compile(r"<[^<>]*>")  # "<task>", "<mode>": the answer template's placeholders


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
    response_format: str = "json_schema"  # start of the structured-output chain (json_schema, json_object, plain)
    breaker_rounds: int = 2  # stop calling after this many consecutive unreachable rounds (0: never stop)
    preflight_retries: int = 3  # preflight: re-tries after an HTTP 5xx, with exponential backoff
    backoff_s: float = 1.0  # preflight: first backoff; doubles at each retry
    notice_after_s: float = 5.0  # print a "waiting for the LLM endpoint" line after this long (0: never)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None, env: Mapping[str, str] | None = None, *,
                     names: Mapping[str, str] | None = None) -> LLMConfig:
        """``names``: what to call a given option in errors (the CLI passes its flags, e.g.
        ``--llm-temperature``); default ``llm <field>``."""
        env = os.environ if env is None else env
        opts = {k: v for k, v in dict(options or {}).items() if v is not None}
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(opts) - set(known))
        if unknown:
            raise PolicyError(f"unknown llm option(s) {', '.join(unknown)} (valid: {', '.join(known)})")
        source = {k: (names or {}).get(k, f"llm {k}") for k in known}  # where each value came from, for errors
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
                          ("max_tokens", int), ("breaker_rounds", int), ("preflight_retries", int),
                          ("backoff_s", float), ("notice_after_s", float)):
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
        for key, low in (("max_retries", 0), ("breaker_rounds", 0), ("max_tokens", 1), ("preflight_retries", 0)):
            if key in opts and opts[key] < low:
                raise PolicyError(f"llm {key} must be >= {low}, got {opts[key]}")
        for key in ("backoff_s", "notice_after_s"):
            if key in opts and not (math.isfinite(opts[key]) and opts[key] >= 0):
                raise PolicyError(f"llm {key} must be a finite number >= 0, got {opts[key]:g}")
        fmt = opts.get("response_format")
        if fmt is not None and fmt not in RESPONSE_FORMATS:
            raise PolicyError(f"llm response_format must be one of {', '.join(RESPONSE_FORMATS)}, got {fmt!r}")
        if not local:
            _check_url(str(opts["base_url"]), source["base_url"])
            opts["base_url"] = str(opts["base_url"]).rstrip("/")
        return cls(**opts)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What ``redact`` must mask: the API key and the base URL's credentials."""
        return (self.api_key, *url_secrets(self.base_url))

    @property
    def safe_url(self) -> str:
        """The base URL with its credentials masked (``http://***@host/v1``), for every message."""
        return redact_url(self.base_url)

    def to_dict(self) -> dict[str, Any]:
        """For reports: everything but the key; the base URL without its credentials."""
        return {f.name: (self.safe_url if f.name == "base_url" else getattr(self, f.name))
                for f in fields(self) if f.name != "api_key"}


def _check_url(url: str, where: str) -> None:
    """An http(s) URL with a host, or a one-line PolicyError."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as e:
        raise PolicyError(redact(f"{where} is not a valid URL: {url!r} ({_one_line(e)})", url_secrets(url))) from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise PolicyError(redact(f"{where} must be an http:// or https:// URL with a host "
                                 f"(or {GGUF_SCHEME}/path/to/model.gguf), got {url!r}", url_secrets(url)))


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
    if not pairs:  # what a tiny model answers without a schema
        raise AnswerError(f"the answer's mapping is empty: give every task ({', '.join(workflow.task_ids)}) a mode")
    copied = next((k for k in pairs if _PLACEHOLDER.fullmatch(k) or _PLACEHOLDER.fullmatch(str(pairs[k]))), None)
    if copied is not None:
        raise AnswerError(f"the answer copied the template's placeholder ({copied}: {pairs[copied]}): name the "
                          f"real tasks ({', '.join(workflow.task_ids)}) and modes")
    bad = next((t for t, v in pairs.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise AnswerError(f"task {bad}: mode must be a string, got {json.dumps(pairs[bad])}")
    try:
        return validate_mapping(workflow, pairs), reason  # every task, modes inside the decision space
    except MappingError as e:
        raise AnswerError(str(e)) from None


def response_schema(workflow: Workflow) -> dict[str, Any]:
    """The ``response_format`` of type ``json_schema`` for ``workflow``: an object with a ``mapping``
    that names every task (required properties) with one of the decision space's modes (enum), and a
    one-sentence ``reason``."""
    sp = workflow.decision_space
    modes = [sp.label(m) for m in sp.modes]
    mapping = {"type": "object", "properties": {t: {"type": "string", "enum": modes} for t in workflow.task_ids},
               "required": list(workflow.task_ids), "additionalProperties": False}
    schema = {"type": "object", "properties": {"mapping": mapping, "reason": {"type": "string"}},
              "required": ["mapping", "reason"], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "placement", "strict": True, "schema": schema}}


def _response_format(kind: str, workflow: Workflow) -> dict[str, Any] | None:
    """The request's ``response_format`` for one link of the chain (None: plain)."""
    if kind == "json_schema":
        return response_schema(workflow)
    if kind == "json_object":
        return {"type": "json_object"}
    return None


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- the reasoner --------------------------------------------------------------------------------
class LLMReasoner(Reasoner):
    """Asks an OpenAI-compatible endpoint for each round's mapping; raises ``NoDecision`` when the
    endpoint gives nothing usable (wrap it in a ``FallbackReasoner``)."""

    name = "llm"

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep,
                 notify: Callable[[str], None] = _stderr_line) -> None:
        self.config = config
        self._sleep = sleep  # the preflight's backoff (injected: tests do not wait)
        self._notify = notify  # where the "waiting for the LLM endpoint" line goes
        self._client: Any = None
        self._local: ChatServer | None = None  # the local GGUF server behind a gguf: base URL
        self._formats = self._chain()  # structured-output formats still worth asking for, this run
        self._unreachable_rounds = 0  # consecutive rounds whose requests could not reach the endpoint
        self._open: str | None = None  # why the circuit is open (no more requests), or None
        self._preflight_ok = False  # one successful preflight is enough for this reasoner's life

    @property
    def label(self) -> str:
        return f"llm:{self.config.model}"

    def describe(self) -> dict[str, Any]:
        """The model, the base URL without credentials and the other settings; never the key."""
        return {"name": self.name, **self.config.to_dict()}

    def _chain(self) -> list[str]:
        return list(RESPONSE_FORMATS[RESPONSE_FORMATS.index(self.config.response_format):])

    def _redact(self, text: str) -> str:
        return redact(text, self.config.secrets)

    def reset(self) -> None:
        """A new run: the unreachable-round count and the structured-output chain start over; an open
        circuit stays open (a dead endpoint costs one run, not every run)."""
        self._unreachable_rounds = 0
        self._formats = self._chain()
        if self._open is not None and not self._open.startswith("held open"):
            self._open = f"held open since an earlier run: {self._open}"

    @property
    def circuit_open(self) -> bool:
        """True once the endpoint was unreachable in ``breaker_rounds`` consecutive rounds or answered a
        permanent error (in this run or an earlier one)."""
        return self._open is not None

    @property
    def open_reason(self) -> str | None:
        """Why the circuit is open, or None."""
        return self._open

    # ---- requests --------------------------------------------------------------------------------
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

    def _create(self, **kwargs: Any) -> Any:
        """One chat completion; a ``waiting for the LLM endpoint`` line when it is slow."""
        client = self.client()  # first: importing the SDK or loading a local model is not the endpoint's wait
        after = self.config.notice_after_s
        timer = None
        if after > 0:
            def notice() -> None:
                self._notify(f"waiting for the LLM endpoint {self.config.safe_url} (model {self.config.model}) "
                             f"... ({after:g} s)")

            timer = threading.Timer(after, notice)
            timer.daemon = True
            timer.start()
        try:
            return client.chat.completions.create(model=self.config.model, **kwargs)
        finally:
            if timer is not None:
                timer.cancel()

    def _status(self, e: Any) -> str:
        """``HTTP 500: <the server's message>``: one clause, no repetition, no secret."""
        return self._redact(_status_reason(e))

    def preflight(self) -> None:
        """One cheap request (a one-token chat completion, the configured timeout); an HTTP 5xx is
        retried ``preflight_retries`` times with exponential backoff. A one-line PolicyError
        ``LLM endpoint <url> is not usable: <reason>`` when it fails."""
        import openai

        if self._preflight_ok:
            return

        def unusable(reason: str) -> PolicyError:
            return PolicyError(self._redact(f"LLM endpoint {self.config.safe_url} is not usable: {reason}"))

        tries = 1 + self.config.preflight_retries
        for n in range(tries):
            try:
                resp = self._create(messages=[{"role": "user", "content": "Reply with OK."}], max_tokens=1,
                                    temperature=0)
            except openai.APITimeoutError:
                raise unusable(f"no answer within {self.config.timeout_s:g} s") from None
            except openai.APIConnectionError as e:
                raise unusable(_connection_reason(e)) from None
            except openai.APIStatusError as e:
                if e.status_code in _PREFLIGHT_OK_STATUSES:
                    break  # the chat route answered; it only disliked the one-token request, or is busy
                transient = e.status_code >= 500 and e.status_code not in PERMANENT_STATUSES
                if transient and n + 1 < tries:
                    delay_s = self.config.backoff_s * 2 ** n
                    log.warning("LLM endpoint %s answered %s; retrying in %g s", self.config.safe_url,
                                self._status(e), delay_s)
                    self._sleep(delay_s)
                    continue
                after = f" after {tries} attempts" if transient and tries > 1 else ""
                raise unusable(f"{self._status(e)}{after}") from None
            except openai.OpenAIError as e:
                raise unusable(f"the answer is not a chat completion ({_one_line(e)})") from None
            except AgentschedError as e:  # e.g. a gguf: model that cannot be served
                raise unusable(_one_line(e)) from None
            if not isinstance(getattr(resp, "choices", None), list):
                raise unusable("the answer is not a chat completion")
            break
        self._preflight_ok = True

    def close(self) -> None:
        """Stop the local model server, if one was started."""
        if self._local is not None:
            self._local.close()
            self._local = None

    def _complete(self, messages: list[dict[str, str]], wf: Workflow, attempt: dict[str, Any]) -> str:
        """One chat completion, walking down the structured-output chain while the server rejects a
        format; raises openai errors for the caller to classify."""
        import openai

        kwargs: dict[str, Any] = {"messages": messages, "temperature": self.config.temperature}
        if self.config.max_tokens is not None:
            kwargs["max_tokens"] = self.config.max_tokens
        while True:
            kind = self._formats[0]
            fmt = _response_format(kind, wf)
            try:
                resp = self._create(**kwargs, **({"response_format": fmt} if fmt else {}))
            except openai.APIStatusError as e:
                if fmt is None or not _rejects_format(e):
                    raise
                # the server does not support this structured output: the next link, for the rest of the run
                attempt.setdefault("response_format_rejected", []).append(f"{kind}: {self._status(e)}")
                self._formats.pop(0)
                continue
            break
        attempt["response_format"] = kind
        if not getattr(resp, "choices", None):
            raise AnswerError("the response has no choices")
        msg = resp.choices[0].message
        reasoning = getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None)
        if reasoning:
            attempt["reasoning"] = str(reasoning)
        return msg.content or ""

    def propose(self, view: AgentView) -> Decision:
        """The mapping for ``view.round`` with the audit record (prompt, every response); ``NoDecision``
        (carrying that record) when the endpoint gives nothing usable."""
        import openai

        wf = view.workflow
        prompt: Prompt = build_prompt(view)
        messages = prompt.messages()
        # "response" is the audit trail: one record per request (its raw content, or why it failed);
        # the fallback wrapper appends a last record naming the fallback when there was one
        attempts: list[dict[str, Any]] = []
        info: dict[str, Any] = {"reasoner": "llm", "model": self.config.model, "base_url": self.config.safe_url,
                                "prompt_version": prompt.version, "prompt": prompt.text(), "response": attempts,
                                "fallback": None}
        if self._open is not None:  # the circuit is open: no request, straight to the fallback
            info["circuit_open"] = self._open
            raise NoDecision(f"endpoint not called: {self._open}", info, quiet=True)
        why = ""
        unreachable = False  # the round's requests all failed to connect or timed out
        permanent = False  # an error that no later request can fix
        for n in range(1 + self.config.max_retries):
            attempt: dict[str, Any] = {"attempt": n + 1}
            attempts.append(attempt)
            try:
                text = self._complete(messages, wf, attempt)
            except openai.APITimeoutError:
                why = f"endpoint timed out after {self.config.timeout_s:g} s"
                unreachable = True
            except openai.APIConnectionError as e:
                why = f"endpoint unreachable at {self.config.safe_url}: {_connection_reason(e)}"
                unreachable = True
            except openai.APIStatusError as e:
                why = f"endpoint answered {self._status(e)}"
                permanent = e.status_code in PERMANENT_STATUSES
            except (openai.OpenAIError, AnswerError) as e:
                why = f"unusable response: {_one_line(e)}"
                permanent = True  # not a chat completion: asking again gets the same
            else:
                attempt["content"] = text
                try:
                    mapping, reason = parse_answer(text, wf)
                except Exception as e:  # noqa: BLE001 - whatever the parser raises, the answer is invalid
                    if not isinstance(e, AnswerError):
                        e = AnswerError(f"the answer cannot be parsed: {type(e).__name__}: {_one_line(e)}")
                    why = f"invalid answer after {n + 1} attempt(s): {e}"
                    attempt["error"] = self._redact(str(e))
                    messages = [*messages, {"role": "assistant", "content": text},
                                {"role": "user", "content": _retry_message(wf, e)}]
                    continue
                attempt["ok"] = True
                self._unreachable_rounds = 0
                info["reason"] = reason
                return Decision(mapping, reason or "the model's answer", info)
            why = self._redact(why)
            attempt["error"] = why
            break  # an endpoint failure is not re-asked within the round
        why = self._redact(why)
        self._unreachable_rounds = self._unreachable_rounds + 1 if unreachable else 0
        limit = self.config.breaker_rounds
        if permanent and limit:
            self._open = f"circuit open after a permanent error ({why}); no more requests"
        elif unreachable and limit and self._unreachable_rounds >= limit:
            self._open = (f"circuit open after {self._unreachable_rounds} consecutive rounds without reaching "
                          f"the endpoint (last: {why}); no more requests")
        if self._open is not None:
            info["circuit_open"] = self._open
            log.warning("agent-llm round %d: %s", view.round, self._open)
        raise NoDecision(why, info)


def _retry_message(wf: Workflow, e: Exception) -> str:
    sp = wf.decision_space
    return (f"Your answer is not valid: {e}. Reply again with one JSON object "
            f'{{"mapping": {{...}}, "reason": "..."}} that gives every task '
            f"({', '.join(wf.task_ids)}) one of the modes {', '.join(sp.label(m) for m in sp.modes)}.")


def _rejects_format(e: Any) -> bool:
    """The server refused the request's response_format (not the request as such)."""
    text = _status_reason(e).lower()
    return e.status_code in _FORMAT_REJECT_STATUSES or "response_format" in text or "json_schema" in text


def _status_reason(e: Any) -> str:
    """``HTTP <status>: <message>`` from an openai APIStatusError: the server's own message, once
    (the SDK's text, "Error code: 500 - {'error': {...}}", repeats the status and the whole body)."""
    body = getattr(e, "body", None)
    msg: Any = None
    if isinstance(body, dict):
        msg = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(msg, dict):
            msg = msg.get("message")
    elif isinstance(body, str):
        msg = body
    if not msg:
        text = str(e)
        msg = re.sub(r"^Error code: \d+\s*-?\s*", "", text)
        if msg == text or not msg.strip() or msg.lstrip().startswith("{"):
            msg = ""
    line = " ".join(str(msg).split())[:200]
    return f"HTTP {e.status_code}: {line}" if line else f"HTTP {e.status_code}"


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
