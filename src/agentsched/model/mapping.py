"""Mappings (task id -> mode): parsing, validation against a workflow, enumeration."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

from agentsched.errors import MappingError
from agentsched.model.workflow import DecisionSpace, Mode, Workflow

MappingT = dict[str, Mode]

# Two mappings whose E2E differ by at most this fraction are equivalent: near-ties (a task off the
# critical path, a host-only tool) that no measurement tells apart. Used by the metrics, the
# calibration and the oracle; written once here.
EQUIVALENCE_TOLERANCE = 0.02

_ALIASES = {"gpu": Mode.GPU_NOW, "now": Mode.GPU_NOW, "queue": Mode.GPU_QUEUE}


def parse_mode(text: str, space: DecisionSpace) -> Mode:
    """A mode from its name; 'gpu' means gpu_now. Raises when outside the decision space."""
    key = str(text).strip().lower()
    try:
        mode = _ALIASES.get(key) or Mode(key)
    except ValueError:
        raise MappingError(
            f"unknown mode {text!r} (valid in {space.value}: {', '.join(space.label(m) for m in space.modes)})"
        ) from None
    if mode not in space.modes:
        raise MappingError(
            f"mode {text!r} is outside the {space.value} decision space "
            f"(valid: {', '.join(space.label(m) for m in space.modes)})"
        )
    return mode


def validate_mapping(workflow: Workflow, mapping: Mapping[str, Mode | str] | str) -> MappingT:
    """A complete mapping in task order; one-line errors for missing/unknown tasks or bad modes.
    ``mapping`` may be given as the text ``A=gpu_now,B=cpu`` (``parse_mapping``)."""
    if isinstance(mapping, str):  # a text is parsed, not iterated letter by letter as a mapping
        return parse_mapping(workflow, mapping)
    if not isinstance(mapping, Mapping):
        raise MappingError(
            f"a mapping must be task -> mode (a dict, or the text A=gpu_now,B=cpu), got {type(mapping).__name__}"
        )
    unknown = [t for t in mapping if t not in workflow.tasks]
    if unknown:
        raise MappingError(
            f"mapping names unknown task(s) {', '.join(map(str, unknown))} (tasks: {', '.join(workflow.task_ids)})"
        )
    missing = [t for t in workflow.task_ids if t not in mapping]
    if missing:
        raise MappingError(f"mapping misses task(s) {', '.join(missing)}")
    out: MappingT = {}
    for t in workflow.task_ids:
        m = mapping[t]
        mode = m if isinstance(m, Mode) else parse_mode(m, workflow.decision_space)
        if mode not in workflow.decision_space.modes:
            raise MappingError(
                f"task {t}: mode {mode.value} is outside the {workflow.decision_space.value} decision space"
            )
        out[t] = mode
    return out


def parse_mapping(workflow: Workflow, text: str) -> MappingT:
    """Parse ``A=gpu_now,B=cpu,...`` (whitespace tolerated)."""
    pairs: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise MappingError(f"mapping item {part!r} is not TASK=MODE")
        k, v = (s.strip() for s in part.split("=", 1))
        if k in pairs:
            raise MappingError(f"mapping gives task {k} twice")
        pairs[k] = v
    unknown = [t for t in pairs if t not in workflow.tasks]
    if unknown:
        raise MappingError(
            f"mapping names unknown task(s) {', '.join(unknown)} (tasks: {', '.join(workflow.task_ids)})"
        )
    return validate_mapping(workflow, {k: parse_mode(v, workflow.decision_space) for k, v in pairs.items()})


def format_mapping(workflow: Workflow, mapping: Mapping[str, Mode]) -> str:
    """``A=gpu,B=cpu`` in task order, with the decision space's labels."""
    sp = workflow.decision_space
    return ",".join(f"{t}={sp.label(mapping[t])}" for t in workflow.task_ids)


_SHORT = {Mode.CPU: "C", Mode.GPU_NOW: "G", Mode.GPU_QUEUE: "Q"}


def format_mapping_short(workflow: Workflow, mapping: Mapping[str, Mode]) -> str:
    """One letter per task in task order: C = cpu, G = gpu / gpu_now, Q = gpu_queue (e.g. GQGC)."""
    return "".join(_SHORT[mapping[t]] for t in workflow.task_ids)


def mapping_key(workflow: Workflow, mapping: Mapping[str, Mode]) -> tuple[Mode, ...]:
    """Hashable form in task order."""
    return tuple(mapping[t] for t in workflow.task_ids)


def enumerate_mappings(workflow: Workflow) -> Iterator[MappingT]:
    """Every mapping of the decision space (2^n or 3^n), in a fixed order."""
    ids = workflow.task_ids
    for combo in itertools.product(workflow.decision_space.modes, repeat=len(ids)):
        yield dict(zip(ids, combo, strict=True))


def oracle_match(a: Mapping[str, Mode], b: Mapping[str, Mode]) -> int:
    """How many tasks two mappings place alike."""
    return sum(1 for t in a if a[t] == b.get(t))
