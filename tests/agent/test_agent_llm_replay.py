"""agent-llm through the runtime: a new process replays the stored history without asking the model
again for rounds it already answered (issue 20, item 10). Before, the k-th invocation of
`agentsched invoke` (one process each) sent k+2 requests; now each process sends its preflight and
the requests of the rounds it runs live."""

from __future__ import annotations

from agentsched.runtime import Runtime
from agentsched.scenarios import load_scenario

GOOD = '{"mapping": {"A": "gpu", "B": "gpu", "C": "cpu", "D": "gpu"}, "reason": "ratios"}'


def test_a_new_runtime_replays_the_models_answers_from_the_store(serve, tmp_path):
    server, script = serve(GOOD)
    llm = {"base_url": server.base_url, "model": "scripted", "timeout_s": 10.0, "max_retries": 0}
    wf = load_scenario("S5")
    db = tmp_path / "s.db"
    per_process = []
    for _ in range(6):  # as `agentsched invoke` does: a new runtime (process) per invocation
        before = script.calls
        with Runtime(
            wf, "agent-llm", store=db, testbed="sim", round_size=1, explore_fraction=0.0, policy_options={"llm": llm}
        ) as rt:
            assert rt.invoke().ok
            replayed = rt.replayed
        per_process.append(script.calls - before)
    assert replayed == 5  # the last process replayed the five earlier invocations from the store
    # its preflight, the round it runs live and the next one (proposed as soon as that round ends):
    # never the old rounds (before the fix the k-th process sent k + 2: 3, 4, 5, 6, 7, 8)
    assert max(per_process) <= 3, per_process


def test_a_reproducible_policy_is_still_asked_so_a_replay_can_diverge(tmp_path):
    """The rules reasoner is deterministic: the runtime replays by asking it again (a changed policy
    is then noticed as a divergence), not by taking the stored mapping on trust."""
    from agentsched.loop.registry import make_policy
    from agentsched.runtime.dispatch import _Tracked

    asked = []
    tracked = _Tracked(make_policy("agent-rules"), recorded=lambda i: asked.append(i))
    assert tracked.reproducible and tracked.recorded is not None
    wf = load_scenario("S5")
    with Runtime(wf, "agent-rules", store=tmp_path / "s.db", testbed="sim", round_size=1) as rt:
        rt.invoke()
        assert rt.policy.reproducible
    assert asked == []  # never consulted for a reproducible policy
