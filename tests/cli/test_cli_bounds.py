"""Upper bounds of the loop options: one line, non-zero exit, before any work."""

from __future__ import annotations

import pytest

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    "argv, message",
    [
        (("run", "S1", "-p", "heft", "--rounds", "10001"), "error: --rounds must be <= 10,000, got 10001"),
        (("run", "S1", "-p", "heft", "--repeats", "1001"), "error: --repeats must be <= 1,000, got 1001"),
        (("bench", "--scenarios", "S1", "--seeds", HUGE), f"error: --seeds must be <= 10,000, got {HUGE}"),
        (("bench", "--scenarios", "S1", "--rounds", HUGE), f"error: --rounds must be <= 10,000, got {HUGE}"),
        (("ablation", "S13", "--seeds", HUGE), f"error: --seeds must be <= 10,000, got {HUGE}"),
        (("ablation", "S13", "--repeats", "1001"), "error: --repeats must be <= 1,000, got 1001"),
        (("agent-check", "S1", "--seeds", HUGE), f"error: --seeds must be <= 10,000, got {HUGE}"),
        (("agent-check", "S1", "--rounds", "10001"), "error: --rounds must be <= 10,000, got 10001"),
        (("prompt", "S1", "--rounds", "10001"), "error: --rounds must be <= 10,000, got 10001"),
    ],
)
def test_loop_options_have_upper_bounds(cli, tmp_path, argv, message):
    extra = ("--out", str(tmp_path / "b")) if argv[0] == "bench" else ()
    code, out, err = cli(*argv, *extra)
    assert code != 0 and out == ""
    assert err.splitlines() == [message]


def test_agent_check_rejects_an_unknown_baseline(cli):
    code, out, err = cli("agent-check", "S13", "--baseline", "foo", "--seeds", "1", "--rounds", "1")
    assert code != 0 and out == ""
    assert err.splitlines() == [
        "error: --baseline foo is not a baseline policy (valid: all-gpu, heft, heft-cf, ucb1, starpu, mem-greedy, none)"
    ]
    code, out, err = cli("agent-check", "S1", "--baseline", "agent-rules", "--seeds", "1", "--rounds", "1")
    assert code != 0 and err.splitlines()[0].startswith("error: --baseline agent-rules is not a baseline policy")
