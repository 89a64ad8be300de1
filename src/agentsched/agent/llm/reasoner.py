"""``LLMReasoner``: asks the endpoint for each round's mapping (the protocol of ``agent/reasoner.py``)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from agentsched.agent.llm.client import (
    BadResponse,
    EndpointError,
    EndpointStatus,
    NotACompletion,
    request_json,
    with_route,
)
from agentsched.agent.llm.config import LLMConfig, one_line
from agentsched.agent.llm.dialects import chain, identify, rejects_link, request_fields
from agentsched.agent.llm.parse import AnswerError, excerpt, parse_answer, retry_message
from agentsched.agent.local_llm import GGUF_SCHEME, ChatServer, serve_gguf
from agentsched.agent.prompt import Prompt, build_prompt
from agentsched.agent.reasoner import Decision, NoDecision, Reasoner
from agentsched.agent.secrets import redact
from agentsched.agent.view import AgentView
from agentsched.errors import AgentschedError, PolicyError
from agentsched.model.workflow import Workflow

log = logging.getLogger("agentsched.agent")

# HTTP statuses that no retry can fix: bad key, forbidden, no such route or model, method, not implemented
PERMANENT_STATUSES = frozenset({401, 403, 404, 405, 501})
# statuses that still prove a usable chat endpoint in the preflight: a rejected parameter (the one-token
# request itself) or a rate limit
_PREFLIGHT_OK_STATUSES = frozenset({400, 422, 429})
#: the longest wait for ``GET /models`` (the server's kind), whatever the request timeout
_IDENTIFY_TIMEOUT_S = 10.0


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class LLMReasoner(Reasoner):
    """Asks an OpenAI-compatible endpoint for each round's mapping; raises ``NoDecision`` when the
    endpoint gives nothing usable (wrap it in a ``FallbackReasoner``)."""

    name = "llm"

    def __init__(
        self,
        config: LLMConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[str], None] = _stderr_line,
    ) -> None:
        self.config = config
        self._sleep = sleep  # the preflight's backoff (injected: tests do not wait)
        self._notify = notify  # where the "waiting for the LLM endpoint" line goes
        self._url: str | None = None  # the endpoint root actually called (a gguf: model's loopback server)
        self._local: ChatServer | None = None  # the local GGUF server behind a gguf: base URL
        self._server = config.server  # the server's dialect; "auto" until learned (kept for the reasoner's life)
        self._links = chain(self._server, config.response_format)  # links still worth asking for, this run
        self._unreachable_rounds = 0  # consecutive rounds whose requests could not reach the endpoint
        self._open: str | None = None  # why the circuit is open (no more requests), or None
        self._preflight_ok = False  # one successful preflight is enough for this reasoner's life
        self._cap_field = "max_tokens"  # the completion cap's name ("max_completion_tokens" where refused)

    @property
    def label(self) -> str:
        return f"llm:{self.config.model}"

    def describe(self) -> dict[str, Any]:
        """The model, the base URL without credentials and the other settings; never the key."""
        return {"name": self.name, **self.config.to_dict()}

    def _redact(self, text: str) -> str:
        return redact(text, self.config.secrets)

    def reset(self) -> None:
        """A new run: the unreachable-round count and the structured-output chain start over (from the
        server's own chain when it was learned); an open circuit stays open (a dead endpoint costs
        one run, not every run)."""
        self._unreachable_rounds = 0
        self._links = chain(self._server, self.config.response_format)
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

    @property
    def server(self) -> str:
        """The server's dialect: configured, learned, or ``auto`` (not needed yet)."""
        return self._server

    # ---- requests --------------------------------------------------------------------------------
    def endpoint(self) -> str:
        """The endpoint root to call; a ``gguf:`` model is loaded and served on the loopback first."""
        if self._url is None:
            base_url = self.config.base_url
            if base_url.startswith(GGUF_SCHEME):
                self._local = serve_gguf(base_url[len(GGUF_SCHEME) :])
                base_url = self._local.base_url
            self._url = base_url
        return self._url

    def _call(self, method: str, route: str, body: Any = None, *, deadline_s: float | None = None) -> Any:
        """One request (JSON answer) within the deadline; a ``waiting for the LLM endpoint`` line when slow."""
        url = with_route(self.endpoint(), route)  # first: loading a local model is not the endpoint's wait
        after = self.config.notice_after_s
        timer = None
        if after > 0:

            def notice() -> None:
                self._notify(
                    f"waiting for the LLM endpoint {self.config.safe_url} (model {self.config.model}) ... ({after:g} s)"
                )

            timer = threading.Timer(after, notice)
            timer.daemon = True
            timer.start()
        try:
            return request_json(
                method,
                url,
                body,
                api_key=self.config.api_key,
                deadline_s=deadline_s or self.config.timeout_s,
                max_bytes=self.config.max_response_bytes,
            )
        finally:
            if timer is not None:
                timer.cancel()

    def _chat(self, **fields: Any) -> dict[str, Any]:
        """A chat completion's first choice (NotACompletion when the answer is not one)."""
        resp = self._call("POST", "/chat/completions", {"model": self.config.model, **fields})
        choices = resp.get("choices") if isinstance(resp, dict) else None
        if not isinstance(choices, list):
            raise NotACompletion("the answer is not a chat completion")
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            raise BadResponse("the response has no message")
        return choices[0]

    def preflight(self) -> None:
        """One cheap request (a one-token chat completion, the configured timeout); an HTTP 5xx is
        retried ``preflight_retries`` times with exponential backoff. A one-line PolicyError
        ``LLM endpoint <url> is not usable: <reason>`` when it fails."""
        if self._preflight_ok:
            return
        tries = 1 + self.config.preflight_retries
        for n in range(tries):
            try:
                self._chat(messages=[{"role": "user", "content": "Reply with OK."}], max_tokens=1, temperature=0)
            except EndpointStatus as e:
                if e.status in _PREFLIGHT_OK_STATUSES:
                    break  # the chat route answered; it only disliked the one-token request, or is busy
                transient = e.status >= 500 and e.status not in PERMANENT_STATUSES
                if transient and n + 1 < tries:
                    delay_s = self.config.backoff_s * 2**n
                    log.warning(
                        "LLM endpoint %s answered %s; retrying in %g s",
                        self.config.safe_url,
                        self._redact(e.reason),
                        delay_s,
                    )
                    self._sleep(delay_s)
                    continue
                after = f" after {tries} attempts" if transient and tries > 1 else ""
                raise self._unusable(f"{e.reason}{after}") from None
            except (EndpointError, AgentschedError) as e:  # e.g. a gguf: model that cannot be served
                raise self._unusable(getattr(e, "reason", None) or one_line(e)) from None
            break
        self._preflight_ok = True

    def _unusable(self, reason: str) -> PolicyError:
        return PolicyError(self._redact(f"LLM endpoint {self.config.safe_url} is not usable: {reason}"))

    def close(self) -> None:
        """Stop the local model server, if one was started."""
        if self._local is not None:
            self._local.close()
            self._local = None
            self._url = None

    def _learn_server(self) -> None:
        """The server's kind from ``GET /models`` (once), and the rest of this run's chain from it."""
        if self._server != "auto":
            return
        try:
            models = self._call("GET", "/models", deadline_s=min(self.config.timeout_s, _IDENTIFY_TIMEOUT_S))
        except EndpointError:
            models = None
        self._server = identify(models, self.endpoint())
        tried = self._links[0]
        self._links = [tried, *(link for link in chain(self._server, tried) if link != tried)]

    def _complete(self, messages: list[dict[str, str]], wf: Workflow, attempt: dict[str, Any]) -> str:
        """One chat completion, walking down the structured-output chain while the server rejects a
        link; raises EndpointError (and AnswerError for a cut answer) for the caller to classify."""
        while True:
            link = self._links[0]
            try:
                choice = self._chat(
                    messages=messages,
                    temperature=self.config.temperature,
                    **{self._cap_field: self.config.max_tokens},
                    **request_fields(link, wf),
                )
            except EndpointStatus as e:
                if self._cap_field == "max_tokens" and "max_completion_tokens" in e.message:
                    # OpenAI's reasoning models take the cap under its newer name: for the reasoner's life
                    self._cap_field = "max_completion_tokens"
                    continue
                if link == "plain" or not rejects_link(e.status, e.message):
                    raise
                # the server does not take this link: the next one, for the rest of the run
                attempt.setdefault("response_format_rejected", []).append(f"{link}: {self._redact(e.reason)}")
                self._learn_server()
                self._links.pop(0)
                continue
            break
        attempt["response_format"] = link
        if self._server != "auto":
            attempt["server"] = self._server
        msg = choice["message"]
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if reasoning:
            attempt["reasoning"] = excerpt(self._redact(str(reasoning)))
        text = _text(msg.get("content"))
        attempt["content"] = excerpt(self._redact(text))
        if len(text) > len(attempt["content"]):
            attempt["content_chars"] = len(text)
        if choice.get("finish_reason") == "length":
            raise BadResponse(
                f"the answer was cut at the completion cap (max_tokens {self.config.max_tokens}, "
                "finish_reason length): raise --llm-max-tokens"
            )
        return text

    def propose(self, view: AgentView) -> Decision:
        """The mapping for ``view.round`` with the audit record (prompt, every response); ``NoDecision``
        (carrying that record) when the endpoint gives nothing usable."""
        wf = view.workflow
        prompt: Prompt = build_prompt(view)
        messages = prompt.messages()
        # "response" is the audit trail: one record per request (its raw content, or why it failed);
        # the fallback wrapper appends a last record naming the fallback when there was one
        attempts: list[dict[str, Any]] = []
        info: dict[str, Any] = {
            "reasoner": "llm",
            "model": self.config.model,
            "base_url": self.config.safe_url,
            "prompt_version": prompt.version,
            "prompt": prompt.text(),
            "response": attempts,
            "fallback": None,
        }
        if self._open is not None:  # the circuit is open: no request, straight to the fallback
            info["circuit_open"] = self._open
            raise NoDecision(f"endpoint not called: {self._open}", info, quiet=True)
        why, failure = "", None
        for n in range(1 + self.config.max_retries):
            attempt: dict[str, Any] = {"attempt": n + 1}
            attempts.append(attempt)
            started = time.monotonic()
            try:
                text = self._complete(messages, wf, attempt)
            except EndpointError as e:
                failure, why = e, self._redact(self._round_reason(e))
                attempt["error"] = why
                break  # an endpoint failure is not re-asked within the round
            finally:  # wall time of the request(s), rejected links included: what a slow server costs
                attempt["elapsed_s"] = round(time.monotonic() - started, 3)
            try:
                mapping, reason = parse_answer(text, wf)
            except Exception as e:  # noqa: BLE001 - whatever the parser raises, the answer is invalid
                if not isinstance(e, AnswerError):
                    e = AnswerError(f"the answer cannot be parsed: {type(e).__name__}: {one_line(e)}")
                why = self._redact(f"invalid answer after {n + 1} attempt(s): {e}")
                attempt["error"] = self._redact(str(e))
                messages = [
                    *messages,
                    {"role": "assistant", "content": excerpt(text)},
                    {"role": "user", "content": retry_message(wf, e)},
                ]
                continue
            attempt["ok"] = True
            self._unreachable_rounds = 0
            info["reason"] = self._redact(reason)
            return Decision(mapping, info["reason"] or "the model's answer", info)
        self._count_failure(failure, why, view.round, info)
        raise NoDecision(why, info)

    def _round_reason(self, e: EndpointError) -> str:
        """How a failed request reads in a round's audit and fallback line."""
        if e.unreachable and "within" in e.reason:
            return f"endpoint timed out after {self.config.timeout_s:g} s"
        if e.unreachable:
            return f"endpoint unreachable at {self.config.safe_url}: {e.reason}"
        if isinstance(e, EndpointStatus):
            return f"endpoint answered {e.reason}"
        return f"unusable response: {e.reason}"

    def _count_failure(self, failure: EndpointError | None, why: str, round_: int, info: dict[str, Any]) -> None:
        """The circuit breaker: unreachable rounds in a row, or a permanent error, stop the calls."""
        unreachable = failure is not None and failure.unreachable
        permanent = failure is not None and (
            failure.permanent or (isinstance(failure, EndpointStatus) and failure.status in PERMANENT_STATUSES)
        )
        self._unreachable_rounds = self._unreachable_rounds + 1 if unreachable else 0
        limit = self.config.breaker_rounds
        if permanent and limit:
            self._open = f"circuit open after a permanent error ({why}); no more requests"
        elif unreachable and limit and self._unreachable_rounds >= limit:
            self._open = (
                f"circuit open after {self._unreachable_rounds} consecutive rounds without reaching "
                f"the endpoint (last: {why}); no more requests"
            )
        if self._open is not None:
            info["circuit_open"] = self._open
            log.warning("agent-llm round %d: %s", round_, self._open)


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
