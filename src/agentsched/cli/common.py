"""Helpers shared by the CLI command modules: workflow/testbed options and output."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console

from agentsched.errors import AgentschedError
from agentsched.model.workflow import Workflow
from agentsched.scenarios import resolve_workflow
from agentsched.testbeds.base import Testbed
from agentsched.testbeds.sim import MAX_NOISE_SIGMA
from agentsched.testbeds.factory import make_testbed

# wide tables when piped (docs, CI logs); the terminal width when interactive
# markup off: task ids, names and messages are user text ("[bold" must print as itself, not crash)
console = Console(width=None if sys.stdout.isatty() else 150, markup=False)
err_console = Console(stderr=True, markup=False)

TESTBED_HELP = "sim (simulated, default), local (real tools on this machine) or ray (real tools on a Ray cluster)"
RAY_ADDRESS_HELP = "ray testbed: cluster to join (auto, or HOST:PORT); default: start a local Ray instance"
EMULATE_GPU_HELP = ("ray testbed without CUDA: GPU placements run on the CPU while holding Ray's GPU share and "
                    "vram_mb (timings are not GPU timings)")
SIZE_HELP = "local testbed model size: small (tiny configs) or paper"
CPU_SLOTS_HELP = "at most this many CPU tasks at once (sim default: unbounded many-core host; local: worker pool)"


def load_workflow(name_or_path: str, cards: str | None = None) -> Workflow:
    """A scenario name or workflow file, optionally re-bound to another card set."""
    wf = resolve_workflow(name_or_path)
    return wf.with_cards(cards) if cards else wf


def build_testbed(kind: str, *, seed: int, noise: float | None = None, size: str = "small",
                  cpu_slots: int | None = None, ray_address: str | None = None,
                  emulate_gpu: bool = False) -> Testbed:
    """The testbed a command asked for."""
    if noise is not None and not (math.isfinite(noise) and 0 <= noise <= MAX_NOISE_SIGMA):
        raise AgentschedError(f"--noise must be a number in [0, {MAX_NOISE_SIGMA:g}], got {noise}")
    if cpu_slots is not None and cpu_slots < 1:
        raise AgentschedError(f"--cpu-slots must be >= 1, got {cpu_slots}")
    if kind != "ray" and (ray_address is not None or emulate_gpu):
        flag = "--ray-address" if ray_address is not None else "--emulate-gpu"
        raise AgentschedError(f"{flag} applies only to --testbed ray (got {kind})")
    if kind == "sim":
        opts: dict[str, Any] = {"seed": seed, "cpu_slots": cpu_slots}
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
