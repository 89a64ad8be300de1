"""The runtime in process: real user tools, failures, the exploration budget, resuming from the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsched import Runtime
from agentsched.errors import PolicyError, StoreError, ToolError
from agentsched.model.execution import Status
from agentsched.model.mapping import mapping_key
from agentsched.model.workflow_io import load_workflow_file
from agentsched.scenarios import load_scenario
from agentsched.store import Store
from agentsched.testbeds.sim import SimTestbed
from agentsched.testbeds.spec import TestbedSpec


@pytest.fixture
def words(on_path):
    return load_workflow_file(on_path / "words.yaml")


def test_invoke_runs_the_user_tools_and_returns_the_sinks(words, tmp_path):
    with Runtime(words, store=tmp_path / "s.db", testbed=TestbedSpec(kind="local", cpu_slots=2)) as rt:
        res = rt.invoke(text="the quick brown fox")
    assert res.ok and res.outputs == {"B": 4, "C": "THE QUICK BROWN FOX"}
    assert set(res.mapping) == {"A", "B", "C"} and res.e2e_ms > 0 and res.invocation_id == 1
    assert [s["task"] for s in res.timeline][0] == "A" and res.kind == "round" and res.round == 0
    assert rt.policy.label == "agent-plan-cold"  # no card: the default policy, in cold start


def test_a_failing_tool_fails_that_invocation_only(words, tmp_path):
    with Runtime(words, store=tmp_path / "s.db", testbed=TestbedSpec(kind="local", cpu_slots=2)) as rt:
        bad = rt.invoke(text="boom")
        good = rt.invoke(text="still works")
    assert bad.status is Status.ERROR and bad.outputs == {}
    assert bad.message == "task A (wordtools:Split) failed: ValueError: cannot split boom"
    assert good.ok and good.outputs["B"] == 2


def test_missing_inputs_are_refused_before_running(words, tmp_path):
    with Runtime(words, store=tmp_path / "s.db", testbed=TestbedSpec(kind="local", cpu_slots=2)) as rt:
        with pytest.raises(ToolError, match=r"missing input\(s\) for source task A \(wordtools:Split\): text"):
            rt.invoke()
        with pytest.raises(ToolError, match="text"):
            rt.invoke(other="x")
        with pytest.raises(ToolError, match=r"invocation input 'txet' is not an input of workflow .* take: text"):
            rt.invoke(text="a", txet="b")  # before, a misspelt extra name was dropped silently (the CLI refused it)
        assert rt.invoke(text="a").ok  # nothing was consumed by the refused calls
    assert len(Store(tmp_path / "s.db").executions(1)) == 1


def test_policies_that_need_cards_are_refused_for_unprofiled_tools(words, tmp_path):
    with pytest.raises(PolicyError, match=r"policy heft needs profile cards, but task\(s\) A, B, C have none"):
        Runtime(words, policy="heft", store=tmp_path / "s.db")
    with pytest.raises(PolicyError, match="offline reference"):
        Runtime(words, policy="oracle", store=tmp_path / "s.db")


def _sim(**kw):
    return SimTestbed(noise_sigma=0.0, **kw)


def test_probes_stay_within_the_exploration_budget():
    wf = load_scenario("S13")  # three-way under a budget: the agent's monitor wants many what-ifs
    for fraction in (0.0, 0.1, 0.3):
        with Runtime(wf, "agent-rules", store=None, testbed=_sim(), round_size=3, explore_fraction=fraction) as rt:
            kinds = [rt.invoke().kind for _ in range(60)]
        probes = kinds.count("probe")
        assert probes <= fraction * 60 + 1e-9
        if fraction > 0:
            assert probes >= 1  # the budget is used, not ignored
        assert rt.probes == probes and rt.executions == 60


def test_a_new_runtime_resumes_learning_where_the_last_stopped(tmp_path):
    """30 invocations in one runtime, or 12 then 18 in a second one on the same store: the same
    mapping for every invocation (the second replays the first's executions into the policy)."""
    wf = load_scenario("S13")

    def mappings(rt, n):
        return [mapping_key(wf, rt.invoke().mapping) for _ in range(n)]

    with Runtime(wf, "agent-rules", store=None, testbed=_sim(), round_size=3, explore_fraction=0.2) as rt:
        straight = mappings(rt, 30)
    db = tmp_path / "s.db"
    with Runtime(wf, "agent-rules", store=db, testbed=_sim(), round_size=3, explore_fraction=0.2) as rt:
        first = mappings(rt, 12)
    with Runtime(wf, "agent-rules", store=db, testbed=_sim(), round_size=3, explore_fraction=0.2) as rt:
        second = mappings(rt, 18)
        assert rt.replayed == 12 and rt.diverged_at is None
    assert first + second == straight
    assert len(set(straight)) > 1  # it did learn something (the mapping changed)
    st = Store(db, read_only=True)
    assert [r.round for r in st.rounds(1)] == list(range(len(st.rounds(1))))
    assert len(st.executions(1)) == 30


def test_each_process_draws_the_noise_of_its_place_not_the_first_again(tmp_path):
    """(Every `invoke` process replayed the stored runs without drawing, then drew the stream's first
    noise again: the same E2E each time, a noise-free history the learner took for noisy.)"""
    wf = load_scenario("S1")
    db = tmp_path / "s.db"
    apart = []
    for _ in range(4):  # four processes, one invocation each
        with Runtime(wf, "agent-rules", store=db, testbed=SimTestbed(noise_sigma=0.05), round_size=2) as rt:
            apart.append(rt.invoke().e2e_ms)
    with Runtime(wf, "agent-rules", store=None, testbed=SimTestbed(noise_sigma=0.05), round_size=2) as rt:
        straight = [rt.invoke().e2e_ms for _ in range(4)]
    assert len(set(apart)) == 4 and apart == pytest.approx(straight)  # each place's own draw, in any process


def test_other_settings_start_another_learner(tmp_path):
    wf = load_scenario("S5")
    db = tmp_path / "s.db"
    with Runtime(wf, store=db, testbed=_sim(), round_size=3) as rt:
        rt.invoke()
    with Runtime(wf, store=db, testbed=_sim(), round_size=4) as rt:
        rt.invoke()
        assert rt.replayed == 0
    assert len(Store(db).learners("S5")) == 2


def _hold(db):
    import sqlite3

    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holding the store past the runtime's wait
    return holder


def test_a_store_locked_for_a_while_costs_no_invocation_and_no_record(tmp_path, monkeypatch):
    """Before, the first write the locked store refused failed its invocation (which had run) and
    stopped the runtime for good: every later invocation failed too."""
    wf = load_scenario("S5")
    db = tmp_path / "s.db"
    st = Store(db, busy_timeout_s=0.2)
    rt = Runtime(wf, store=st, testbed=_sim(), round_size=3)
    clock = [0.0]
    rt.history.writes.clock = lambda: clock[0]
    tries = []
    real_append = st.append
    monkeypatch.setattr(st, "append", lambda *a, **k: (tries.append(1), real_append(*a, **k))[1])
    try:
        assert rt.invoke().invocation_id == 1
        holder = _hold(db)
        try:
            during = [rt.invoke() for _ in range(4)]  # a round ends meanwhile: its record waits too
            rt.pin({t: "cpu" for t in wf.task_ids})
            during.append(rt.invoke())  # a pinned run, outside the sequence: its record waits as well
            rt.unpin()
            assert len(tries) == 2  # the first refused write; the others joined it without waiting on the store
            clock[0] += 10.0  # a retry is due: it waits briefly, and the store still refuses
            assert rt.invoke().invocation_id is None and len(tries) == 3
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert all(r.ok and r.invocation_id is None for r in during)  # answered; their ids are not known yet
        clock[0] += 10.0
        after = rt.invoke()
        assert after.ok and after.invocation_id == 8  # the waiting records went first, in order
    finally:
        rt.close()
        st.close()
    st = Store(db, read_only=True)
    try:
        assert [e.seq for e in st.executions(1)] == [0, 1, 2, 3, 4, None, 5, 6] and len(st.rounds(1)) == 2
    finally:
        st.close()


def test_records_the_store_still_refuses_at_close_are_kept_and_the_next_store_writes_them(tmp_path, caplog):
    """Before, they were lost (said in the log), and the learner's history with them."""
    wf, db = load_scenario("S5"), tmp_path / "s.db"
    st = Store(db, busy_timeout_s=0.2)
    rt = Runtime(wf, store=st, testbed=_sim(), round_size=3)
    holder = _hold(db)
    try:
        results = [rt.invoke() for _ in range(4)]  # a round ends meanwhile: its record is refused too
        rt.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        st.close()
    assert all(r.ok and r.invocation_id is None for r in results)
    assert "5 record(s) not written (the store still refused them at close) are kept in" in caplog.text
    assert Path(f"{db}.unwritten.jsonl").exists()
    with Runtime(wf, store=db, testbed=_sim(), round_size=3) as rt:  # its store writes them first
        assert not Path(f"{db}.unwritten.jsonl").exists()
        assert rt.invoke().invocation_id == 5
        assert rt.replayed == 4  # the kept records are the learner's history: replayed, not run again
    st = Store(db, read_only=True)
    try:
        assert [e.seq for e in st.executions(1)] == [0, 1, 2, 3, 4] and len(st.rounds(1)) == 1
        assert [e.e2e_ms for e in st.executions(1)[:4]] == [r.e2e_ms for r in results]
    finally:
        st.close()


def test_workflow_from_tools_runs_classes_and_instances(tmp_path):
    import agentsched
    from agentsched.runtime import workflow_from_tools

    class Add(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            return inputs["x"] + 1

    class Double(agentsched.Tool):
        has_gpu = False

        def __init__(self, factor):
            self.factor = factor

        def run(self, inputs):
            return inputs["A"] * self.factor

    wf = workflow_from_tools("arith", {"A": Add, "B": Double(3)}, [("A", "B")])
    with Runtime(wf, store=tmp_path / "s.db", testbed=TestbedSpec(kind="local", cpu_slots=1)) as rt:
        assert rt.invoke(x=1).outputs == {"B": 6}
        assert rt.invoke(x=10).outputs == {"B": 33}


def test_a_workflow_of_tool_instances_resumes_its_learner_in_a_new_process(tmp_path):
    """Before, an instance was keyed by its object id: every process started a new learner."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    import agentsched

    (tmp_path / "inst_tools.py").write_text(
        textwrap.dedent("""
        import agentsched

        class Scale(agentsched.Tool):
            has_gpu = False
            input_names = ("x",)

            def __init__(self, factor):
                self.factor = factor

            def run(self, inputs):
                return inputs["x"] * self.factor
    """)
    )
    script = textwrap.dedent(f"""
        from agentsched import Runtime
        from agentsched.runtime import workflow_from_tools
        from inst_tools import Scale
        wf = workflow_from_tools("inst", {{"S": Scale(2)}})
        with Runtime(wf, store={str(tmp_path / "s.db")!r}, testbed="local") as rt:
            print(rt.invoke(x=4).outputs["S"], rt.learner_id)
    """)
    src = str(Path(agentsched.__file__).parents[1])
    runs = [
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": f"{src}:{tmp_path}", "PATH": "/usr/bin:/bin"},
        )
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["8", "1"], ["8", "1"]], [r.stderr[-300:] for r in runs]


def test_profile_user_tools_by_import_path(on_path, tmp_path, cli):
    out = tmp_path / "cards.json"
    code, printed, err = cli(
        "profile", "--tools", "wordtools:Shout", "--out", str(out), "--runs", "3", "--warmup", "0", "--busy", "ignore"
    )
    assert code == 0, err
    assert "3 runs" in printed and "size" not in printed  # --size is the built-in tools': not said of user tools
    from agentsched.model.cards import load_card_set

    card = load_card_set(out).cards["wordtools:Shout"]
    assert card.cpu_ms > 0 and card.gpu_ms is None  # measured on the CPU; a host-only tool
    assert card.workload == "upper-case the words, joined" and card.tags == ("compute-bound",)
    wf_file = tmp_path / "words.yaml"
    wf_file.write_text((on_path / "words.yaml").read_text() + "cards: cards.json\n")
    wf = load_workflow_file(wf_file)
    assert wf.unprofiled == frozenset({"A", "B"}) and wf.task_cards["C"].cpu_ms == card.cpu_ms

    code, _, err = cli("profile", "--tools", "wordtools:Split", "--out", str(tmp_path / "x.json"))
    assert code == 2 and err.strip() == (
        "error: tool wordtools:Split defines no example_inputs() (a dict of the "
        "inputs run() takes): the profiler has nothing to time it on"
    )
    code, _, err = cli("profile", "--tools", "wordtools:Plain", "--out", str(tmp_path / "x.json"))
    assert code == 2 and "class Plain is not an agentsched.Tool subclass" in err


def test_a_long_running_runtime_keeps_a_bounded_window_of_rounds(tmp_path):
    """Issue 22: the runtime keeps the last rounds only, and no tool output in any record; every
    invocation still returns its output and the store still has the whole history."""
    import agentsched
    from agentsched.loop.runner import ENDLESS_KEEP_ROUNDS
    from agentsched.runtime import workflow_from_tools

    class Big(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            return "y" * 50_000 + str(inputs["x"])

    wf = workflow_from_tools("big", {"A": Big}, [])
    n = ENDLESS_KEEP_ROUNDS + 10
    with Runtime(wf, store=tmp_path / "s.db", round_size=1) as rt:
        for i in range(n):
            assert rt.invoke(x=i).outputs["A"].endswith(str(i))
        assert len(rt.records) == ENDLESS_KEEP_ROUNDS < n
        assert all(x.outputs == {} for r in rt.records for x in (*r.result.executions, *r.probes))
    assert len(Store(tmp_path / "s.db").executions(1)) == n


def test_a_history_that_cannot_be_replayed_is_one_line_naming_the_learner_and_how_to_forget_it(
    tmp_path, monkeypatch, cli
):
    import agentsched.monitor.monitor as monitor

    wf = load_scenario("S13")
    db = tmp_path / "s.db"
    with Runtime(wf, "agent-rules", store=db, testbed=_sim(), round_size=3) as rt:
        for _ in range(6):
            rt.invoke()
    real = monitor.RuntimeMonitor.observe

    def broken(self, result):  # a policy bug met while observing a stored round
        raise KeyError("host")

    monkeypatch.setattr(monitor.RuntimeMonitor, "observe", broken)
    with Runtime(wf, "agent-rules", store=db, testbed=_sim(), round_size=3) as rt, pytest.raises(StoreError) as e:
        rt.invoke()
    assert str(e.value) == (
        f"learner 1 (S13, agent-rules) in store {db} cannot replay its history (after 3 stored invocations: "
        f"KeyError: 'host'); forget it to start afresh: agentsched history S13 --store {db} --forget 1 "
        "(or Store(path).forget(1))"
    )
    monkeypatch.setattr(monitor.RuntimeMonitor, "observe", real)
    code, out, err = cli("history", "S13", "--store", str(db), "--forget", "1")
    assert code == 0 and out.strip() == f"forgot learner 1 of S13 (6 invocations) in {db}", err
    code, _, err = cli("history", "S13", "--store", str(db), "--forget", "1")
    assert code == 2 and err.strip() == f"error: store {db} has no learner 1 of workflow 'S13'"
    with Runtime(wf, "agent-rules", store=db, testbed=_sim(), round_size=3) as rt:
        assert rt.invoke().ok and rt.replayed == 0  # a fresh learner
