"""Cards, workflows, mappings and the oracle."""

import json
import re

import pytest

from agentsched import Mode, SimTestbed, brute_force, load_card_set, load_scenario, parse_mapping
from agentsched.errors import CardError, MappingError, WorkflowError
from agentsched.model.cards import ToolCard, builtin_card_sets
from agentsched.model.mapping import enumerate_mappings, format_mapping, oracle_match, validate_mapping
from agentsched.scenarios import list_scenarios, resolve_workflow


def test_a5500_is_table1():
    cs = load_card_set("a5500")
    assert "a5500" in builtin_card_sets()
    assert len(cs.cards) == 19
    bert = cs.cards["bert_base"]
    assert (bert.gpu_ms, bert.cpu_ms, bert.vram_mb, bert.load_ms) == (13, 892, 486, 481)
    assert cs.cards["web_search"].gpu_ms is None and not cs.cards["web_search"].has_gpu


def test_amplified_tools():
    cs = load_card_set("a5500")
    a = cs.resolve("clip_x12")
    assert (a.name, a.gpu_ms, a.cpu_ms, a.vram_mb, a.load_ms) == ("clip_x12", 144, 2652, 656, 2944)
    assert cs.resolve("clip", 12) == a
    assert cs.resolve("clip_x3", 4).gpu_ms == 144
    with pytest.raises(CardError, match="unknown tool 'nope_x3'"):
        cs.resolve("nope_x3")


def test_explicit_amplified_card_wins(tiny_cards):
    from agentsched.model.cards import CardSet, ToolCard

    cs = CardSet(name="c", cards={**tiny_cards.cards, "x_x2": ToolCard(name="x_x2", cpu_ms=1, gpu_ms=1, vram_mb=1)})
    assert cs.resolve("x", 2).cpu_ms == 1
    assert cs.resolve("x", 3).cpu_ms == 300


def test_card_set_round_trip(tmp_path):
    cs = load_card_set("a5500")
    p = tmp_path / "c.json"
    cs.save(p)
    again = load_card_set(p)
    assert again.cards == cs.cards


@pytest.mark.parametrize(
    "doc,needle",
    [
        ("{", "invalid JSON"),
        ('{"cards": {"x": {"cpu_ms": -1}}}', "cpu_ms"),
        ('{"cards": {"x": {"cpu_ms": 1, "bogus": 2}}}', "bogus"),
        ("[]", "expected an object"),
        # a card keyed under one tool and named another (a trial's hand edit ran as if nothing were wrong)
        ('{"cards": {"m:Bert": {"name": "other", "cpu_ms": 3}}}', "tool 'm:Bert': its card is named 'other'"),
        # incomplete GPU figures (before: a GPU card without vram_mb held 0 MB, no budget ever stopped it)
        ('{"cards": {"asr": {"cpu_ms": 90, "gpu_ms": 5}}}', r"^card file .*: cards\.asr: gpu_ms without vram_mb: "),
    ],
)
def test_bad_card_files(tmp_path, doc, needle):
    p = tmp_path / "bad.json"
    p.write_text(doc)
    with pytest.raises(CardError, match=needle):
        load_card_set(p)


def test_scenarios_match_table3():
    assert list_scenarios() == [f"S{i}" for i in range(1, 14)]
    s13 = load_scenario("s13")
    assert s13.vram_budget_mb == 1100 and s13.decision_space.value == "three_way"
    assert s13.total_vram_mb == 1645
    assert load_scenario("S1").edges == (("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"))
    assert load_scenario("S5").total_vram_mb == 4136


def test_mapping_parse_and_format():
    wf = load_scenario("S5")
    m = parse_mapping(wf, "A=gpu, B=gpu_now,C=cpu,D=gpu")
    assert m == {"A": Mode.GPU_NOW, "B": Mode.GPU_NOW, "C": Mode.CPU, "D": Mode.GPU_NOW}
    assert format_mapping(wf, m) == "A=gpu,B=gpu,C=cpu,D=gpu"
    assert oracle_match(m, {**m, "C": Mode.GPU_NOW}) == 3
    assert len(list(enumerate_mappings(wf))) == 16
    assert len(list(enumerate_mappings(load_scenario("S13")))) == 81


@pytest.mark.parametrize(
    "text,needle",
    [
        ("A=gpu,B=gpu,C=cpu", "misses task(s) D"),
        ("A=gpu,B=gpu,C=cpu,D=gpu,E=cpu", "unknown task(s) E"),
        ("A=gpu,B=gpu,C=cpu,D=gpu_queue", "outside the binary decision space"),
        ("A=gpu,B=tpu,C=cpu,D=gpu", "unknown mode 'tpu'"),
        ("A=gpu,A=cpu,B=gpu,C=cpu,D=gpu", "twice"),
        ("A:gpu", "not TASK=MODE"),
    ],
)
def test_bad_mappings(text, needle):
    with pytest.raises(MappingError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_mapping(load_scenario("S5"), text)


def test_a_mapping_given_as_text_or_not_a_mapping():
    """Runtime.pin("A=cpu") read the text letter by letter ("unknown task(s) =, c, p, u"); pin(None)
    was a TypeError."""
    wf = load_scenario("S5")
    assert validate_mapping(wf, "A=gpu,B=cpu,C=cpu,D=gpu") == parse_mapping(wf, "A=gpu,B=cpu,C=cpu,D=gpu")
    for bad, name in ((None, "NoneType"), (["A"], "list"), (3, "int")):
        with pytest.raises(MappingError) as e:
            validate_mapping(wf, bad)
        assert str(e.value) == f"a mapping must be task -> mode (a dict, or the text A=gpu_now,B=cpu), got {name}"


def _write(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text,needle",
    [
        ("tasks: {A: {tool: clip}}\nedges: [[A, B]]", "unknown task 'B'"),
        ("tasks: {A: {tool: clip}, B: {tool: clip}}\nedges: [[A, B], [B, A]]", "cycle: A -> B -> A"),
        ("tasks: {A: {tool: nope}}", "unknown tool 'nope'"),
        (
            "tasks: {A: {tool: clip}}\nvram_budget_mb: -5",
            "vram_budget_mb must be a finite number > 0 (none: omit it), got -5",
        ),
        (
            "tasks: {A: {tool: clip}}\nvram_budget_mb: 0",
            "vram_budget_mb must be a finite number > 0 (none: omit it), got 0",
        ),
        ("tasks: {A: {tool: clip}}\nvram_budget_mb: 10", "below every tool's VRAM"),
        ("tasks: {A: {tool: clip}}\ndecision_space: four_way", "decision_space"),
        ("tasks: {A: {tool: clip, repeat: 0}}", "repeat"),
        ("tasks: {}", "no tasks"),
        ("tasks: [A: {tool: clip]", "invalid YAML"),
        ("- 1\n- 2", "expected a mapping"),
        ("tasks: {A: {tool: clip}}\nedges: [[A]]", "not a [from, to] pair"),
        ("tasks:\n  A: {tool: clip}\n  A: {tool: ocr}", "duplicate key 'A'"),
        ("tasks:\n  ? [a, b]\n  : clip", "a mapping key must be a plain value"),
        ("tasks: {A: {tool: clip, repeat: 10000000}}", "repeat"),
        ("tasks: {A: {tool: clip_x1000000, repeat: 2}}", "exceeds 1,000,000"),
        ("tasks: {A: {tool: clip}}\nedges: [[A, [B]]]", "endpoints must be task ids"),
        ("tasks: {A: " + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
        ("tasks: {A: {tool: clip, repeat: .nan}}", "repeat"),
        ("tasks: {A: {tool: clip}}\nvram_budget_mb: .nan", "vram_budget_mb"),
    ],
)
def test_bad_workflow_files(tmp_path, text, needle):
    with pytest.raises(WorkflowError, match=re.escape(needle)):
        resolve_workflow(_write(tmp_path, text))


def test_workflow_file_json_and_relative_cards(tmp_path):
    load_card_set("a5500").save(tmp_path / "mycards.json")
    doc = {
        "name": "J",
        "cards": "mycards.json",
        "tasks": {"A": "clip", "B": {"tool": "bert_base", "repeat": 2}},
        "edges": [["A", "B"]],
    }
    wf = resolve_workflow(_write(tmp_path, json.dumps(doc), "w.json"))
    assert wf.task_cards["B"].name == "bert_base_x2" and wf.preds["B"] == ("A",)


def test_a_card_file_is_looked_for_next_to_the_workflow_never_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "flows").mkdir()
    load_card_set("a5500").save(tmp_path / "mycards.json")  # in the current directory only
    monkeypatch.chdir(tmp_path)
    doc = {"name": "J", "cards": "mycards.json", "tasks": {"A": "clip"}}
    path = _write(tmp_path / "flows", json.dumps(doc), "w.json")
    with pytest.raises(WorkflowError, match=r"card set '.*flows/mycards.json' is neither a built-in set"):
        resolve_workflow(path)


def test_missing_workflow_file():
    with pytest.raises(WorkflowError, match="not found"):
        resolve_workflow("does/not/exist.yaml")
    with pytest.raises(WorkflowError, match="neither a built-in scenario"):
        resolve_workflow("S99")


def test_oracle_ranks_and_filters():
    wf = load_scenario("S13")
    res = brute_force(wf, SimTestbed(noise_sigma=0))
    assert len(res.ranked) == 81 and res.executions == 81
    feas = res.feasible
    assert all(a.e2e_ms <= b.e2e_ms for a, b in zip(feas, feas[1:], strict=False))
    assert all(e.peak_vram_mb <= 1100 for e in feas)
    assert all(e.e2e_ms is None for e in res.ranked[len(feas) :])
    all_now = {t: Mode.GPU_NOW for t in wf.task_ids}
    assert res.entry(all_now).e2e_ms is None
    assert res.equivalent(res.best.mapping)


def test_oracle_on_noisy_testbed_uses_median_of_repeats():
    import random

    wf = load_scenario("S2")
    res = brute_force(wf, SimTestbed(noise_sigma=0.03), repeats=3, rng=random.Random(1), use_expected=False)
    assert res.executions == 16 * 3
    exact = brute_force(wf, SimTestbed(noise_sigma=0.03))
    assert exact.executions == 16  # the simulator's expected values: one exact run per mapping
    assert exact.best.mapping == res.best.mapping


def test_yaml_merge_keys_still_work(tmp_path):
    wf = resolve_workflow(_write(tmp_path, "tasks:\n  A: &b {tool: clip}\n  B: {<<: *b, repeat: 3}\n"))
    assert wf.task_cards["B"].name == "clip_x3"


def test_card_bounds(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"cards": {"x": {"cpu_ms": 1e300}}}')
    with pytest.raises(CardError, match="cpu_ms"):
        load_card_set(p)


def test_oracle_measures_host_only_placements_once():
    import random

    wf = load_scenario("S1")  # D is web_search: no GPU implementation
    res = brute_force(wf, SimTestbed(noise_sigma=0.05), repeats=2, rng=random.Random(3), use_expected=False)
    assert len(res.ranked) == 16 and res.executions == 8 * 2
    for e in res.ranked:
        twin = res.entry({**e.mapping, "D": Mode.GPU_NOW if e.mapping["D"] is Mode.CPU else Mode.CPU})
        assert twin.e2e_ms == e.e2e_ms and twin.status is e.status


def test_a_card_s_workload_is_one_line():
    """It goes into the LLM's cards table: a newline in it broke the table's row."""
    card = ToolCard(name="t", workload="multi\nline  workload\t", cpu_ms=1.0)
    assert card.workload == "multi line workload"


def test_an_invalid_card_file_is_named_by_its_path_not_its_set_name(tmp_path):
    """A copy of a built-in set keeps its name: before, the error read as if the built-in set were broken."""
    data = json.loads(load_card_set("a5500").to_json())
    data["cards"]["clip"]["cpu_ms"] = -5
    f = tmp_path / "c_neg.json"
    f.write_text(json.dumps(data))
    with pytest.raises(CardError, match=rf"^card file {f}: cards\.clip\.cpu_ms: Input should be greater than 0"):
        load_card_set(str(f))


def test_a_cycle_in_a_workflow_file_names_the_file(tmp_path):
    from agentsched.model.workflow_io import load_workflow_file

    f = tmp_path / "c.yaml"
    f.write_text("name: cyc\ncards: a5500\ntasks:\n  A: {tool: clip}\n  B: {tool: ocr}\nedges: [[A, B], [B, A]]\n")
    with pytest.raises(WorkflowError, match=rf"^{f}: workflow 'cyc' has a cycle: "):  # before: no file named
        load_workflow_file(f)
