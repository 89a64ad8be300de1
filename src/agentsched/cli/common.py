"""Helpers shared by the CLI command modules: workflow/testbed options and output."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import typer
from rich.console import Console

from agentsched.errors import AgentschedError
from agentsched.model.workflow import Workflow
from agentsched.scenarios import resolve_workflow_and_world
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.factory import make_testbed
from agentsched.testbeds.sim import MAX_NOISE_SIGMA
from agentsched.testbeds.world import World, choose_world, load_world

# wide tables when piped (docs, CI logs); the terminal width when interactive
# markup off: task ids, names and messages are user text ("[bold" must print as itself, not crash)
console = Console(width=None if sys.stdout.isatty() else 150, markup=False)
err_console = Console(stderr=True, markup=False)

# One JSON convention for every command (docs/json.md): --json prints JSON to stdout; --json-out FILE
# writes the same document to a file and keeps the text output.
JSON_HELP = "print JSON to stdout instead of text"
JSON_OUT_HELP = "also write the JSON document to this file"
TESTBED_HELP = "sim (simulated, default), local (real tools on this machine) or ray (real tools on a Ray cluster)"
RAY_ADDRESS_HELP = "ray testbed: cluster to join (auto, or HOST:PORT); default: start a local Ray instance"
EMULATE_GPU_HELP = ("ray testbed without CUDA: GPU placements run on the CPU while holding Ray's GPU share and "
                    "vram_mb (timings are not GPU timings)")
SIZE_HELP = "local testbed model size: small (tiny configs) or paper"
CPU_SLOTS_HELP = "at most this many CPU tasks at once (sim default: unbounded many-core host; local: worker pool)"

# The --world option of every command that runs the simulator, declared once (typer reads it as the default).
WORLD = typer.Option(
    None, "--world",
    help="simulated world (GPU contention) of --testbed sim: a5500 (built-in, calibrated), a world JSON file, or "
         "perturbed:SEED (a5500 with every parameter scaled by a seeded factor in [1/3, 3]); default: the workflow "
         "file's world: key, else a5500",
)


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
            err_console.print(f"note: card set {wf.card_set.name} has no GPU figures for any task of {wf.name}: "
                              "every GPU placement runs as a CPU task (profile on a GPU for GPU cards)",
                              highlight=False, markup=False, soft_wrap=True)
    return wf, world


def pick_world(testbed: str, world: str | None, from_workflows: list[str | None]) -> World | None:
    """The world the simulator runs in: --world, else the workflow files' world: key, else a5500.
    None for a testbed that is not simulated (a world given there with --world is an error)."""
    if testbed != "sim":
        if world is not None:
            raise AgentschedError(f"--world applies only to --testbed sim (got --testbed {testbed})")
        return None
    return load_world(choose_world(world, from_workflows))


SEED_HELP = ("seed S: the testbed noise and the policy's choices draw from two streams derived from S "
             "('noise:S', 'policy:S'); same S, same result")


def cpu_cores_option(policy: str, options: dict[str, Any], cpu_slots: int | None) -> dict[str, Any]:
    """``options`` plus ``cpu_cores=cpu_slots`` for a policy that plans CPU cores (heft, heft-cf, starpu),
    so its machine model has the cores the testbed has; unchanged otherwise."""
    from agentsched.loop.registry import accepts

    if cpu_slots is None or not accepts(policy, "cpu_cores"):
        return options
    return {**options, "cpu_cores": cpu_slots}


def build_testbed(kind: str, *, seed: int, noise: float | None = None, size: str = "small",
                  cpu_slots: int | None = None, world: World | None = None, ray_address: str | None = None,
                  emulate_gpu: bool = False) -> Testbed:
    """The testbed a command asked for (``world``: the simulator's, see ``pick_world``)."""
    if noise is not None and not (math.isfinite(noise) and 0 <= noise <= MAX_NOISE_SIGMA):
        raise AgentschedError(f"--noise must be a number in [0, {MAX_NOISE_SIGMA:g}], got {noise}")
    if cpu_slots is not None and cpu_slots < 1:
        raise AgentschedError(f"--cpu-slots must be >= 1, got {cpu_slots}")
    if kind != "ray" and (ray_address is not None or emulate_gpu):
        flag = "--ray-address" if ray_address is not None else "--emulate-gpu"
        raise AgentschedError(f"{flag} applies only to --testbed ray (got {kind})")
    if kind == "sim":
        opts: dict[str, Any] = {"seed": seed, "cpu_slots": cpu_slots, "world": world}
        if noise is not None:
            opts["noise_sigma"] = noise
        return make_testbed("sim", **opts)
    if kind == "ray":  # --cpu-slots caps concurrent CPU tasks (default: the cluster's CPUs)
        return make_testbed("ray", size=size, seed=seed, address=ray_address, emulate_gpu=emulate_gpu,
                            cpu_slots=cpu_slots)
    if kind == "local":  # --cpu-slots is the local testbed's CPU worker pool size
        return make_testbed("local", size=size, **({"cpu_workers": cpu_slots} if cpu_slots else {}))
    return make_testbed(kind)  # raises the one-line error listing valid testbeds


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


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
