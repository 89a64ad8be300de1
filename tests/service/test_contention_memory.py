"""``serve --placement live`` keeps what its planner learned about contention in the store: a
restarted server resumes it, a re-profiled tool starts afresh, a damaged row is skipped."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

import agentsched.data
from agentsched.experiments.loadgen import run_against
from agentsched.experiments.traffic import seeded_arrivals
from agentsched.model.cards import split_amplified
from agentsched.planner.prior import contention_prior
from agentsched.planner.traffic import TrafficPlanner
from agentsched.scenarios import load_scenario
from agentsched.service import Engine, contention_memory
from agentsched.service.contention_memory import unit_cards
from agentsched.store import Store
from agentsched.testbeds.live_machine import LiveMachine
from agentsched.testbeds.spec import TestbedSpec
from tests.service.test_live_placement import MIX, SYNC_S, _config

INVOCATIONS = 24


def _learn(service: Engine) -> None:
    """Invocations of both workflows at once (their GPU runs overlap: contention to learn from)."""
    threads = [threading.Thread(target=service.invoke, args=(MIX[i % 2], {})) for i in range(INVOCATIONS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(SYNC_S)


def _served_and_learned(tmp_path, **kw) -> dict:
    service = Engine(_config(tmp_path, **kw))
    try:
        _learn(service)
    finally:
        service.close()
    learned = service.machines.contention.planner.learner.learned()
    assert learned and sum(n for _, _, n in learned.values()) >= 10  # it learned from runs beside others
    return learned


def _restored(tmp_path, **kw):
    service = Engine(_config(tmp_path, **kw))
    service.close()  # nothing served: what it holds came from the store
    return service.machines.contention.planner.learner


def test_a_restarted_server_resumes_the_contention_it_learned(tmp_path):
    learned = _served_and_learned(tmp_path)
    learner = _restored(tmp_path)
    assert learner.learned().keys() == learned.keys()
    for unit, (s, p, runs) in learned.items():
        assert learner.learned()[unit] == pytest.approx((s, p, runs))
    assert learner.runs == 0  # none learned in the second process: every figure came from the store


def test_a_reprofiled_tool_starts_from_its_prior_and_the_others_keep_theirs(tmp_path):
    learned = _served_and_learned(tmp_path)
    doc = json.loads((Path(agentsched.data.__file__).parent / "cards" / "a5500.json").read_text())
    unit = sorted(learned)[0]
    doc["cards"][unit]["gpu_ms"] *= 1.5  # the machine changed: this tool was profiled again
    path = tmp_path / "reprofiled.json"
    path.write_text(json.dumps(doc))
    learner = _restored(tmp_path, cards=str(path))
    assert set(learner.learned()) == set(learned) - {unit}
    card = next(
        c
        for name in MIX
        for c in load_scenario(name).with_cards(str(path)).task_cards.values()
        if split_amplified(c.name)[0] == unit
    )
    assert learner.params(card) == pytest.approx(contention_prior(card.tags))


def _damaged(tmp_path, caplog, column: str, value: str) -> tuple[dict, str, Engine]:
    """Learned, then the first unit's ``column`` set to ``value`` in the store; a restarted service."""
    learned = _served_and_learned(tmp_path)
    unit = sorted(learned)[0]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute(f"UPDATE contention SET {column} = {value} WHERE unit = ?", (unit,))
    with caplog.at_level(logging.WARNING, logger="agentsched.service"):
        service = Engine(_config(tmp_path))
        service.close()
    return learned, unit, service


def test_a_damaged_row_is_skipped_with_a_warning(tmp_path, caplog):
    learned, unit, service = _damaged(tmp_path, caplog, "s", "-1.0")
    assert f"learned contention of {unit} in the store ignored" in caplog.text
    assert set(service.machines.contention.planner.learner.learned()) == set(learned) - {unit}


def test_one_key_per_unit_whatever_its_repeat_and_another_per_machine():
    cards = unit_cards([load_scenario("S7"), load_scenario("S1")])
    assert set(cards) >= {"ocr", "clip", "bert_base", "whisper_base", "llama_1b", "sentiment"}
    assert len(cards["whisper_base"]) == 1  # whisper_base_x4 in S7 and whisper_base in S1: one tool, one key
    assert unit_cards([load_scenario("S7")], "another machine")["ocr"] != cards["ocr"]


def test_learning_under_another_simulated_world_is_not_resumed(tmp_path):
    learned = _served_and_learned(tmp_path)
    assert (
        learned
        and _restored(tmp_path, testbed=TestbedSpec(kind="sim", noise_sigma=0.0, world="a5500-power")).learned() == {}
    )


def test_a_busy_server_saves_as_it_learns_not_only_when_it_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(contention_memory, "SAVE_EVERY_RUNS", 5)
    service = Engine(_config(tmp_path))
    try:
        _learn(service)
        saved = service.store.contention(h for hashes in service.machines.contention.cards.values() for h in hashes)
        assert saved and sum(r.runs for r in saved) >= 5  # written while serving, before close
    finally:
        service.close()


@pytest.mark.parametrize("value", ["'x'", "NULL", "2.5"])
def test_a_damaged_run_count_is_skipped_with_a_warning(tmp_path, caplog, value):
    learned = _served_and_learned(tmp_path)
    unit = sorted(learned)[0]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("CREATE TABLE c2 AS SELECT * FROM contention")  # without NOT NULL: a NULL can be written
        conn.execute("DROP TABLE contention")
        conn.execute("ALTER TABLE c2 RENAME TO contention")
        conn.execute(f"UPDATE contention SET runs = {value} WHERE unit = ?", (unit,))
    with caplog.at_level(logging.WARNING, logger="agentsched.service"):
        learner = _restored(tmp_path)
    assert f"learned contention of {unit} in the store ignored" in caplog.text
    assert set(learner.learned()) == set(learned) - {unit}


def test_a_store_that_refuses_the_save_is_a_warning_and_serving_goes_on(tmp_path, caplog):
    path = tmp_path / "s.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:  # a contention table this schema cannot write (damaged)
        conn.execute("DROP TABLE contention")
        conn.execute(
            "CREATE TABLE contention (unit TEXT, card_hash TEXT, s REAL, p REAL, runs INTEGER, "
            "updated_s REAL, owner TEXT NOT NULL, PRIMARY KEY (unit, card_hash))"
        )
    service = Engine(_config(tmp_path))
    with caplog.at_level(logging.WARNING, logger="agentsched.service"):
        try:
            _learn(service)
        finally:
            service.close()
    assert "could not save the learned contention" in caplog.text and "contention table refused" in caplog.text
    assert service.outside_runs["S1"] + service.outside_runs["S7"] == INVOCATIONS  # every invocation answered
    assert len(Store(path).executions(service.runtimes["S1"].learner_id)) == INVOCATIONS // 2  # and recorded


def _runs_learned(server) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    return float(
        next(line.split()[-1] for line in text.splitlines() if line.startswith("agentsched_contention_runs_learned "))
    )


def test_a_server_process_restarted_on_its_store_starts_with_what_it_learned(start_server, tmp_path):
    args = [
        *MIX,
        "--store",
        str(tmp_path / "l.db"),
        "--testbed",
        "sim",
        "--realtime",
        "--time-scale",
        "100",
        "--vram-budget-mb",
        "2048",
        "--placement",
        "live",
        "--max-concurrency",
        "1000",
    ]
    first = start_server(args)
    shots = run_against(first.url, seeded_arrivals("poisson", 6.0, 6.0, MIX, seed=4), MIX, time_scale=100.0)
    assert shots and all(s.status == "ok" for s in shots)
    learned = _runs_learned(first)
    assert learned >= 10 and first.stop() == 0  # a graceful stop saves what it learned
    second = start_server(args)
    assert _runs_learned(second) == learned
    assert second.stop() == 0


def test_a_restarted_server_resumes_the_measured_ratios_too(tmp_path):
    service = Engine(_config(tmp_path))
    try:
        _learn(service)
    finally:
        service.close()
    before = {u: r for u, r in service.machines.contention.planner.measured.log_ratio.items() if r != 0.0}
    assert before  # its GPU runs were measured
    again = Engine(_config(tmp_path))
    again.close()
    assert again.machines.contention.planner.measured.log_ratio == pytest.approx(before)


def test_a_ratio_measured_without_contention_learned_is_kept_alone(tmp_path):
    """A tool measured on the GPU that never ran beside another has a ratio and no (s, p) learned:
    the ratio survives the restart; its (s, p) stay the prior's (no run learned, none restored)."""
    workflows = [load_scenario(name) for name in MIX]
    card = next(c for wf in workflows for c in wf.task_cards.values() if c.has_gpu)
    unit = split_amplified(card.name)[0]
    store = Store(tmp_path / "alone.db")
    planner = TrafficPlanner()
    machine = LiveMachine(planner, workflows, vram_budget_mb=8192.0, cpu_slots=2)  # starts the planner's stream
    planner.learner.params(card)  # predicted once, as the planner does before a start
    planner.measured.restore(unit, 0.4)  # then measured: its runs took e^0.4 x the prediction
    memory = contention_memory.ContentionMemory(store, workflows)
    memory.attach(planner, machine)
    memory.save(at_least=0)
    again = contention_memory.ContentionMemory(store, workflows)
    assert again.load() == {}  # no (s, p) learned from any run
    assert again.restored_ratios == {unit: pytest.approx(0.4)}
    store.close()


def test_a_damaged_measured_ratio_is_skipped_alone_with_a_warning(tmp_path, caplog):
    learned, unit, service = _damaged(tmp_path, caplog, "log_ratio", "'x'")
    assert f"measured ratio of {unit} in the store ignored" in caplog.text
    assert unit not in service.machines.contention.planner.measured.log_ratio  # measured again
    assert set(service.machines.contention.planner.learner.learned()) == set(learned)  # its (s, p) kept
