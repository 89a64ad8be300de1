"""agent-llm against a real local model server (issue 21's check; needs a model, so not CI).

    # a llama-cpp-python server (build it without native CPU flags), or the project's own gguf: server
    python -m llama_cpp.server --model gemma-3-270m-it-Q4_K_M.gguf --port 8080 &
    python benchmarks/llm_local_server.py --llm-base-url http://127.0.0.1:8080/v1 --llm-model gemma
    python benchmarks/llm_local_server.py --llm-base-url gguf:/path/gemma-3-270m-it-Q4_K_M.gguf
    python benchmarks/llm_local_server.py ... --quick     # part 1 only

Part 1: S5, agent-llm, 4 rounds: for each round whether the model decided (no fallback), the
structured-output link used, and each request's wall time; passes when every round is the model's
and every request took under --max-request-s (60).
Part 2: S1-S13 (one seed): in how many of the model's own rounds (no fallback) its mapping is
oracle-equivalent (within 2% of the noise-free oracle), with and without --llm-predictions,
beside the share of oracle-equivalent rounds of agent-rules and agent-plan on the same runs.
"""

from __future__ import annotations

import argparse
import sys

from agentsched.loop.metrics import oracle_view
from agentsched.loop.registry import make_policy
from agentsched.loop.runner import reference_oracle, run_loop
from agentsched.scenarios import list_scenarios, load_scenario
from agentsched.testbeds import SimTestbed


def llm_policy(args: argparse.Namespace, predictions: bool = False):
    llm = {
        "base_url": args.llm_base_url,
        "model": args.llm_model,
        "timeout_s": args.timeout_s,
        "max_tokens": args.max_tokens,
    }
    return make_policy("agent-llm", llm={k: v for k, v in llm.items() if v is not None}, predictions=predictions)


def part1(args: argparse.Namespace) -> bool:
    policy = llm_policy(args)
    policy.preflight(load_scenario("S5"))
    try:
        run = run_loop(
            load_scenario("S5"), policy, SimTestbed(seed=args.seed), rounds=args.rounds, repeats=1, seed=args.seed
        )
    finally:
        policy.close()
    ok = True
    for n, rec in enumerate(run.records):
        info = rec.proposal_info
        requests = [a for a in info["response"] if "attempt" in a]
        slowest = max((a.get("elapsed_s", 0.0) for a in requests), default=0.0)
        model = info["fallback"] is None
        ok &= model and slowest < args.max_request_s
        link = requests[-1].get("response_format", "-") if requests else "-"
        print(
            f"S5 R{n}: {'model' if model else 'FALLBACK: ' + info['fallback'][:100]}; link {link}; "
            f"{len(requests)} attempt(s), slowest {slowest:.1f} s"
        )
    print(f"part 1: {'PASS' if ok else 'FAIL'} (every round the model's, every request < {args.max_request_s:g} s)")
    return ok


def equivalent_share(run, view, model_only: bool) -> tuple[int, int]:
    """(oracle-equivalent rounds, rounds counted): the model's own rounds only when ``model_only``."""
    rounds = [
        (rec, r)
        for rec, r in zip(run.records, run.rounds, strict=False)
        if not model_only or rec.proposal_info.get("fallback") is None
    ]
    return sum(view.equivalent(r.mapping) for _, r in rounds), len(rounds)


def part2(args: argparse.Namespace) -> None:
    rows = {
        "agent-llm": lambda: llm_policy(args),
        "agent-llm[predictions]": lambda: llm_policy(args, True),
        "agent-rules": lambda: make_policy("agent-rules"),
        "agent-plan": lambda: make_policy("agent-plan"),
    }
    print("scenario | " + " | ".join(rows))
    for name in args.scenarios or list_scenarios():
        wf = load_scenario(name)
        tb = SimTestbed(seed=args.seed)
        view = oracle_view(wf, reference_oracle(wf, tb))
        cells = []
        for label, build in rows.items():
            policy = build()
            try:
                run = run_loop(wf, policy, SimTestbed(seed=args.seed), rounds=args.rounds, repeats=1, seed=args.seed)
            finally:
                policy.close()
            hit, total = equivalent_share(run, view, model_only=label.startswith("agent-llm"))
            cells.append(f"{hit}/{total}")
        print(f"{name} | " + " | ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm-base-url", required=True)
    ap.add_argument("--llm-model")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--max-request-s", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenarios", nargs="*")
    ap.add_argument("--quick", action="store_true", help="part 1 only")
    args = ap.parse_args(argv)
    ok = part1(args)
    if not args.quick:
        part2(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
