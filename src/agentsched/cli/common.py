"""Helpers shared by the CLI command modules: workflows, the testbed spec, output. (Options shared
by several commands are declared in ``options.py``.)"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from agentsched.cli.options import SPEC_OPTIONS
from agentsched.errors import AgentschedError, FieldError
from agentsched.model.workflow import Workflow
from agentsched.scenarios import resolve_workflow_and_world
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.spec import TestbedKind, TestbedSpec
from agentsched.testbeds.world import choose_world, load_world
from agentsched.tools.base import Size

# wide tables when piped (docs, CI logs); the terminal width when interactive
# markup off: task ids, names and messages are user text ("[bold" must print as itself, not crash)
console = Console(width=None if sys.stdout.isatty() else 150, markup=False)
err_console = Console(stderr=True, markup=False)


def load_workflow(name_or_path: str, cards: str | None = None) -> Workflow:
    """A scenario name or workflow file, optionally re-bound to another card set."""
    return load_workflow_and_world(name_or_path, cards)[0]


def load_workflow_and_world(name_or_path: str, cards: str | None = None) -> tuple[Workflow, str | None]:
    """``load_workflow``, and the world the workflow file's ``world:`` key names (None: none)."""
    wf, world = resolve_workflow_and_world(name_or_path)
    if cards:
        wf = wf.with_cards(cards)
        host_only = [t for t, c in wf.task_cards.items() if not c.has_gpu]
        if host_only and len(host_only) == len(wf.task_ids):  # e.g. a card set profiled with --device cpu
            err_console.print(
                f"note: card set {wf.card_set.name} has no GPU figures for any task of {wf.name}: "
                "every GPU placement runs as a CPU task (profile on a GPU for GPU cards)",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    return wf, world


def testbed_spec(
    kind: TestbedKind,
    *,
    seed: int = 0,
    noise: float | None = None,
    size: Size = Size.SMALL,
    cpu_slots: int | None = None,
    world: str | None = None,
    from_workflows: Sequence[str | None] = (),
    ray_address: str | None = None,
    emulate_gpu: bool = False,
    task_timeout_s: float | None = None,
) -> TestbedSpec:
    """The command's testbed spec, built once. On the simulator the world is chosen here (--world,
    else the workflow files' world: key, else a5500) and loaded once; a --world given to another
    testbed is the spec's one-line error."""
    kind = TestbedKind(kind)
    chosen: Any = world
    if kind is TestbedKind.SIM:
        chosen = load_world(choose_world(world, list(from_workflows)))
    try:
        return TestbedSpec(
            kind=kind,
            seed=seed,
            noise_sigma=noise,
            size=size,
            cpu_slots=cpu_slots,
            world=chosen,
            ray_address=ray_address,
            emulate_gpu=emulate_gpu,
            timeout_s=task_timeout_s,
        )
    except FieldError as e:  # the spec names its fields; a command line, its flags
        raise by_flag(e, FLAG_OF_FIELD) from None


# the flag that sets each TestbedSpec field (its first declaration in options.py), for the spec's errors
FLAG_OF_FIELD = {field: option.param_decls[0] for field, option in SPEC_OPTIONS.items()}


def by_flag(error: FieldError, flags: Mapping[str, str]) -> FieldError:
    """``error`` with its field called by the flag that sets it (``flags``: field -> flag), read
    from the error's ``field``, never from its text; a field no flag sets keeps its name."""
    return error.renamed(flags[error.field]) if error.field in flags else error


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)  # streamed, as write_json: a large run's text is never whole
    sys.stdout.write("\n")


def existing_store(store: Any) -> None:
    """One-line error unless ``store`` is a file (a command that reads a store never creates one)."""
    if not store.is_file():
        raise AgentschedError(f"store {store} {'is not a regular file' if store.exists() else 'does not exist'}")
    if store.stat().st_size == 0:  # (SQLite would make it a new store: vacuum and forget did)
        from agentsched.store.store import EMPTY

        raise AgentschedError(f"store {store} {EMPTY}")


def positive(name: str, value: int) -> int:
    if value < 1:
        raise AgentschedError(f"{name} must be >= 1, got {value}")
    return value


def testbed_notes(testbed: Testbed) -> list[str]:
    """Lines every output of a run on ``testbed`` must carry (an emulated GPU: timings are not GPU ones)."""
    if testbed.name != "ray":
        return []
    from agentsched.testbeds.ray import emulation_note

    note = emulation_note(testbed)
    return [note] if note else []


# upper bounds of the loop options: far above any sensible run, far below what overflows or never ends
MAX_ROUNDS = 10_000
MAX_REPEATS = 1_000
MAX_SEEDS = 10_000


def loop_counts(*, rounds: int | None = None, repeats: int | None = None, seeds: int | None = None) -> None:
    """--rounds, --repeats, --seeds: >= 1 and at most MAX_*; one-line AgentschedError otherwise."""
    for flag, value, limit in (
        ("--rounds", rounds, MAX_ROUNDS),
        ("--repeats", repeats, MAX_REPEATS),
        ("--seeds", seeds, MAX_SEEDS),
    ):
        if value is None:
            continue
        positive(flag, value)
        if value > limit:
            raise AgentschedError(f"{flag} must be <= {limit:,}, got {value}")


def preflight(testbed: Testbed, workflows: list[Workflow]) -> None:
    """Fail before any run when ``testbed`` cannot run these workflows at all (the local testbed on a
    machine without CUDA: every policy and the oracle place tasks on the GPU). One-line TestbedError."""
    for wf in workflows:
        testbed.preflight(wf)


def policy_preflight(policy: Any, workflows: list[Workflow]) -> None:
    """The policy's own check before any run (agent-llm: one cheap request to its endpoint): a one-line
    error (``LLM endpoint <url> is not usable: <reason>``) instead of a fallback in every round."""
    for wf in workflows:
        policy.preflight(wf)


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"
