"""invoke --inputs-jsonl (many invocations in one process, JSONL out), invoke --mapping, history --best."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from agentsched.errors import AgentschedError


def read_inputs_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, inputs) for each non-blank line, a JSON object of NAME: VALUE; a one-line error
    naming the first bad line."""
    from agentsched.model.files import read_small_text

    try:
        text = read_small_text(path, "--inputs-jsonl file")
    except ValueError as e:
        raise AgentschedError(str(e)) from None
    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            raise AgentschedError(f"--inputs-jsonl {path}: line {n}: invalid JSON ({e.msg})") from None
        if not isinstance(doc, dict):
            raise AgentschedError(f"--inputs-jsonl {path}: line {n}: expected a JSON object of NAME: VALUE")
        out.append((n, doc))
    if not out:
        raise AgentschedError(f"--inputs-jsonl {path}: no inputs (one JSON object per line)")
    return out


def pin_mapping(rt: Any, text: str) -> None:
    """--mapping A=cpu,...: the invocation runs this mapping, outside the learner (kind pinned)."""
    from agentsched.model.mapping import parse_mapping

    rt.pin(parse_mapping(rt.workflow, text))


def run_jsonl(rt: Any, lines: list[tuple[int, dict[str, Any]]]) -> int:
    """Invoke once per line (one process: tools stay loaded); one JSON line out each. Returns how many failed."""
    from agentsched.service.bounded import jsonable

    failed = 0
    for n, inputs in lines:
        try:
            res = rt.invoke(**inputs)
        except AgentschedError as e:  # this line's inputs are refused; the others still run
            typer.echo(json.dumps({"line": n, "status": "refused", "message": str(e)}))
            failed += 1
            continue
        failed += not res.ok
        typer.echo(
            json.dumps(
                jsonable(
                    {
                        "line": n,
                        "invocation_id": res.invocation_id,
                        "kind": res.kind,
                        "round": res.round,
                        "status": res.status.value,
                        "message": res.message,
                        "mapping": {t: m.value for t, m in res.mapping.items()},
                        "e2e_ms": res.e2e_ms,
                        "outputs": res.outputs,
                    }
                )
            )
        )
    return failed


def best_docs(st: Any, learners: list[Any]) -> list[dict[str, Any]]:
    """Each learner's best observed round (lowest median E2E among ok rounds)."""
    from agentsched.store.admin import best_round

    return [{"learner": ln.id, "policy": ln.policy, **best_round(st, ln.id)} for ln in learners]


def print_best(name: str, docs: list[dict[str, Any]], json_out: bool) -> None:
    """Each learner's best mapping, its modes spelled as the service's API spells them (``gpu_now``)."""
    from agentsched.model.workflow import Mode

    if json_out:
        typer.echo(json.dumps({"workflow": name, "learners": docs}, indent=2))
        return
    for d in docs:
        if d["best_mapping"] is None:
            typer.echo(f"learner {d['learner']} ({d['policy']}): no round observed ok yet")
            continue
        mapping = ",".join(f"{t}={Mode(m).value}" for t, m in d["best_mapping"].items())  # as the API spells it
        typer.echo(
            f"learner {d['learner']} ({d['policy']}): best {mapping} (round {d['best_round']}, "
            f"median E2E {d['best_e2e_ms']:,.1f} ms, of {d['rounds']} ok rounds)"
        )
