"""An LLM answer to a mapping: reasoning blocks stripped, the final JSON object taken, validated."""

from __future__ import annotations

import json
import re
from typing import Any

from agentsched.agent.llm.config import one_line
from agentsched.agent.view import MappingT
from agentsched.errors import AgentschedError, MappingError
from agentsched.model.mapping import validate_mapping
from agentsched.model.workflow import Workflow

_REASONING_TAGS = ("think", "thinking", "reasoning", "reflection")
_PLACEHOLDER = re.compile(r"<[^<>]*>")  # "<task>", "<mode>": the answer template's placeholders
#: the most characters of one answer kept in the audit (and sent back in a retry): head and tail
EXCERPT_CHARS = 4000


class AnswerError(AgentschedError):
    """An LLM answer that is not a valid mapping (one line, fed back to the model)."""


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` when it has at most ``limit`` characters; else its head and tail (the final JSON object
    is at the end) around a note of how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[-half:]}"


def strip_reasoning(text: str) -> str:
    """Drop ``<think>...</think>`` (and similar) blocks; an unmatched closing tag drops all before it;
    an unclosed opening tag drops all after it."""
    out = text
    for tag in _REASONING_TAGS:
        out = re.sub(rf"<{tag}>.*?</{tag}>", "", out, flags=re.S | re.I)
        close = re.search(rf"</{tag}>", out, flags=re.I)
        if close:  # servers that strip the opening tag
            out = out[close.end() :]
        opening = re.search(rf"<{tag}>", out, flags=re.I)
        if opening:  # truncated reasoning: nothing after it is an answer
            out = out[: opening.start()]
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
        raise AnswerError(f"the answer cannot be parsed: {one_line(e)}") from None
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
        raise AnswerError(
            f"the answer copied the template's placeholder ({copied}: {pairs[copied]}): name the "
            f"real tasks ({', '.join(workflow.task_ids)}) and modes"
        )
    bad = next((t for t, v in pairs.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise AnswerError(f"task {bad}: mode must be a string, got {json.dumps(pairs[bad])}")
    try:
        return validate_mapping(workflow, pairs), reason  # every task, modes inside the decision space
    except MappingError as e:
        raise AnswerError(str(e)) from None


def retry_message(wf: Workflow, e: Exception) -> str:
    """What the model is told after an invalid answer."""
    sp = wf.decision_space
    return (
        f"Your answer is not valid: {e}. Reply again with one JSON object "
        f'{{"mapping": {{...}}, "reason": "..."}} that gives every task '
        f"({', '.join(wf.task_ids)}) one of the modes {', '.join(sp.label(m) for m in sp.modes)}."
    )
