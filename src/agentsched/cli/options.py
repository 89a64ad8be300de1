"""Every option more than one command takes, declared once (typer reads these as the parameters'
defaults). Choices are typed by their enums, so typer itself rejects a bad value in one line
(``Invalid value for '--start': 'hot' is not one of 'warm', 'cold'``)."""

from __future__ import annotations

import copy
import enum
from pathlib import Path
from typing import Any

import typer

from agentsched.model.options import InitialRule, StartKind
from agentsched.policies.heft import MACHINE_MODELS
from agentsched.testbeds.spec import DEFAULT_NOISE_SIGMA, TestbedKind
from agentsched.tools.base import Size

# heft/heft-cf machine models, as a choice typer checks (the names live in policies/heft.py)
HeftMachine = enum.Enum("HeftMachine", {m.upper(): m for m in MACHINE_MODELS}, type=str)  # type: ignore[misc]

_SAME: Any = object()  # variant(): the shared default kept


def variant(option: Any, *, default: Any = _SAME, help: str | None = None, short: str | None = None) -> Any:
    """``option`` as one command takes it: the same flag (written once, here) with that command's own
    default and/or help, and ``short``: a short name it also takes (``-o``). Only for a real difference
    (say why at the call), never a rewording."""
    out = copy.copy(option)
    if short is not None:
        out.param_decls = (*option.param_decls, short)
    if default is not _SAME:
        out.default = default
    if help is not None:
        out.help = help
    return out


# One JSON convention for every command (docs/json.md): --json prints JSON to stdout; --json-out FILE
# writes the same document to a file and keeps the text output.
JSON_HELP = "print JSON to stdout instead of text"
JSON_OUT_HELP = "also write the JSON document to this file"
SEED_HELP = (
    "seed S: the testbed noise and the policy's choices draw from two streams derived from S "
    "('noise:S', 'policy:S'); same S, same result"
)
TESTBED_HELP = "sim (simulated, default), local (real tools on this machine) or ray (real tools on a Ray cluster)"
CPU_SLOTS_HELP = (
    "at most this many CPU tasks at once (sim default: unbounded many-core host, 16 on serve's "
    "--realtime shared machine; local: worker pool)"
)

JSON = typer.Option(False, "--json", help=JSON_HELP)
JSON_OUT = typer.Option(None, "--json-out", help=JSON_OUT_HELP)
# run, throughput: their progress text still prints beside the JSON, so it moves to stderr
JSON_TEXT_ON_STDERR = variant(JSON, help=JSON_HELP + " (the text goes to stderr)")

# ---- the testbed spec (testbeds/spec.py) -----------------------------------------------------------
TESTBED = typer.Option(TestbedKind.SIM, "--testbed", help=TESTBED_HELP)
SEED = typer.Option(0, "--seed", help=SEED_HELP)
SIZE = typer.Option(
    Size.SMALL, "--size", help="local/ray testbed: the built-in tools' model size (small: tiny configs; paper)"
)
NOISE = typer.Option(None, "--noise", help=f"sim noise sigma (default {DEFAULT_NOISE_SIGMA:g}; 0 = expected values)")
CPU_SLOTS = typer.Option(None, "--cpu-slots", help=CPU_SLOTS_HELP)
RAY_ADDRESS = typer.Option(
    None, "--ray-address", help="ray testbed: cluster to join (auto, or HOST:PORT); default: start a local Ray instance"
)
EMULATE_GPU = typer.Option(
    False,
    "--emulate-gpu",
    help="ray testbed without CUDA: GPU placements run on the CPU "
    "while holding Ray's GPU share and vram_mb (timings are not "
    "GPU timings)",
)
TASK_TIMEOUT = typer.Option(
    None,
    "--task-timeout-s",
    min=0.001,
    help="local/ray testbed: a task running longer than this many seconds ends its "
    "execution as error (its tool instance dropped, loaded afresh next time); default: "
    "no limit on local, 3600 on ray",
)
WORLD = typer.Option(
    None,
    "--world",
    help="simulated world (GPU contention) of --testbed sim: a5500 (built-in, calibrated), a world JSON file, or "
    "perturbed:SEED (a5500 with every parameter scaled by a seeded factor in [1/3, 3]); default: the workflow "
    "file's world: key, else a5500",
)
# each option above, keyed by the TestbedSpec field it sets: the spec's errors name its flag on the
# command line (common.testbed_spec), so a new spec field is its option and one entry here
SPEC_OPTIONS = {
    "kind": TESTBED,
    "seed": SEED,
    "noise_sigma": NOISE,
    "size": SIZE,
    "cpu_slots": CPU_SLOTS,
    "world": WORLD,
    "ray_address": RAY_ADDRESS,
    "emulate_gpu": EMULATE_GPU,
    "timeout_s": TASK_TIMEOUT,
}

# ---- policies ------------------------------------------------------------------------------------
START = typer.Option(None, "--start", help="agent policies only: warm (profile cards) or cold (no measurements)")
INITIAL = typer.Option(
    None,
    "--initial",
    help="round 0: rules (the written rules) or all-gpu (no prior: what the "
    "monitor alone recovers); default: both tables",
)
POLICY_OPTION = typer.Option(
    None,
    "--policy-option",
    "-O",
    help="KEY=VALUE (repeatable): a policy option as `agentsched policies` lists it; VALUE is read as JSON "
    "(a number, true/false, an object) or else as text. On bench it applies to every chosen policy that "
    "takes KEY; POLICY.KEY=VALUE names one (one policy's KEY given twice is an error)",
)
HEFT_MODEL = typer.Option(
    None,
    "--heft-model",
    help="heft/heft-cf machine: parallel (default: the GPU runs tasks "
    "side by side at isolated speed) or classical (one task at a "
    "time per processor: --cpu-slots cores, default 1, and one GPU)",
)
CARDS = typer.Option(None, "--cards", help="card set name or JSON file (default: the workflow's)")

POLICY_DEFAULT_HELP = "default: agent-plan, or agent-plan-cold when a task has no card"
POLICY = typer.Option(None, "--policy", "-p", help=f"policy name (see `agentsched policies`; {POLICY_DEFAULT_HELP})")

# ---- the closed loop (run, bench, ablation, agent-check) --------------------------------------------
ROUNDS = typer.Option(20, "--rounds", help="rounds per run (the paper uses 20)")
REPEATS = typer.Option(5, "--repeats", help="executions per round; the round's E2E is their median")
SEEDS = typer.Option(5, "--seeds", help="runs per scenario and policy, seeds 0..N-1")

# ---- mappings, outputs ---------------------------------------------------------------------------
MAPPING = typer.Option(None, "--mapping", help="TASK=PLACEMENT,... e.g. A=cpu,B=gpu_now (cpu, gpu_now or gpu_queue)")
# simulate and throughput also take -m (invoke never did)
MAPPING_M = variant(MAPPING, short="-m")
OUT = typer.Option(..., "--out", help="output folder")

# ---- the runtime: its store, invocations' inputs, rounds of invocations (invoke, serve, ...) ---------
STORE = typer.Option(Path("agentsched.db"), "--store", help="the runtime's SQLite store")
INPUT = typer.Option(None, "--input", "-i", help="NAME=VALUE (repeatable; text)")
INPUT_JSON = typer.Option(None, "--input-json", help="JSON object of NAME: VALUE")
INPUTS_JSONL = typer.Option(
    None, "--inputs-jsonl", help="one invocation per line (a JSON object of NAME: VALUE), in one process; JSONL out"
)
ROUND_SIZE = typer.Option(5, "--round-size", help="invocations per round (one mapping each)")

# ---- arrival streams and the shared machine (load, loadgen, serve --realtime) ---------------------
RATES = typer.Option(..., "--rates", help="arrival rates per simulated second, comma-separated")
ARRIVAL = typer.Option("poisson", "--arrival", help="poisson, bursty or trace:FILE (TIME_S,WORKFLOW lines)")
DURATION_S = typer.Option(60.0, "--duration-s", help="arrivals over this many simulated seconds")
VRAM_BUDGET_MB = typer.Option(
    None,
    "--vram-budget-mb",
    help="the shared GPU's VRAM budget (default: the largest budget the workflows name; none if none)",
)
TIME_SCALE = typer.Option(
    1.0, "--time-scale", help="--realtime: simulated ms per wall ms (10: a 60 s simulated stream runs in 6 s)"
)
TOKEN_FILE = typer.Option(
    None, "--token-file", help="file holding the bearer token clients must send (Authorization: Bearer TOKEN)"
)

# ---- agent-llm (the --llm-* options) -------------------------------------------------------------
LLM_BASE_URL = typer.Option(None, "--llm-base-url", help="agent-llm: OpenAI-compatible URL")
LLM_MODEL = typer.Option(None, "--llm-model", help="agent-llm: model name")
LLM_API_KEY = typer.Option(None, "--llm-api-key", help="agent-llm: API key")
LLM_TEMPERATURE = typer.Option(None, "--llm-temperature", help="agent-llm: temperature")
LLM_TIMEOUT = typer.Option(None, "--llm-timeout", help="agent-llm: request timeout (s)")
LLM_MAX_TOKENS = typer.Option(
    None, "--llm-max-tokens", help="agent-llm: completion cap per request (default 512; reasoning models need more)"
)
# each LLMConfig field's flag, taken from its option above (errors name the flag a bad value came from)
LLM_FLAGS = {
    field: option.param_decls[0]
    for field, option in {
        "base_url": LLM_BASE_URL,
        "model": LLM_MODEL,
        "api_key": LLM_API_KEY,
        "temperature": LLM_TEMPERATURE,
        "timeout_s": LLM_TIMEOUT,
        "max_tokens": LLM_MAX_TOKENS,
    }.items()
}
LLM_PREDICTIONS = typer.Option(
    None,
    "--llm-predictions/--no-llm-predictions",
    help="agent-llm: add the planner's model predictions (top mappings with predicted "
    "E2E, VRAM and a range) to the prompt as a fifth stream (default: off)",
)

__all__ = [
    "ARRIVAL",
    "CARDS",
    "CPU_SLOTS",
    "DURATION_S",
    "EMULATE_GPU",
    "HEFT_MODEL",
    "HeftMachine",
    "INITIAL",
    "INPUT",
    "INPUTS_JSONL",
    "INPUT_JSON",
    "InitialRule",
    "JSON",
    "JSON_OUT",
    "JSON_TEXT_ON_STDERR",
    "LLM_FLAGS",
    "MAPPING",
    "MAPPING_M",
    "NOISE",
    "OUT",
    "POLICY",
    "POLICY_DEFAULT_HELP",
    "POLICY_OPTION",
    "RATES",
    "RAY_ADDRESS",
    "REPEATS",
    "ROUNDS",
    "ROUND_SIZE",
    "SEED",
    "SEEDS",
    "SIZE",
    "SPEC_OPTIONS",
    "START",
    "STORE",
    "StartKind",
    "TASK_TIMEOUT",
    "TESTBED",
    "TIME_SCALE",
    "TOKEN_FILE",
    "TestbedKind",
    "VRAM_BUDGET_MB",
    "WORLD",
    "variant",
]
