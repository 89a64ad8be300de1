"""`agentsched generate`: seeded and reproducible, every topology, one-line errors for bad arguments."""

from __future__ import annotations

import networkx as nx
import pytest

from agentsched.errors import WorkflowError
from agentsched.model.generate import generate_suite, generate_workflow
from agentsched.scenarios import resolve_workflow


@pytest.mark.parametrize("topology", ["chain", "fan-out", "layered", "random"])
def test_topologies(topology):
    wf = generate_workflow(tasks=9, topology=topology, space="three_way", seed=2)
    assert len(wf.tasks) == 9 and nx.is_directed_acyclic_graph(wf.graph)
    if topology == "chain":
        assert len(wf.edges) == 8 and len(wf.sinks) == 1
    if topology == "fan-out":
        assert wf.edges == ()


def test_same_arguments_same_files(tmp_path):
    a = generate_suite(
        tmp_path / "a", count=3, seed=5, tasks=6, topology="random", space="binary", budget_tightness=0.4
    )
    b = generate_suite(
        tmp_path / "b", count=3, seed=5, tasks=6, topology="random", space="binary", budget_tightness=0.4
    )
    assert [p.read_text() for p in a] == [p.read_text() for p in b]
    assert len({p.read_text() for p in a}) == 3  # the indices differ
    c = generate_suite(tmp_path / "c", count=1, seed=6, tasks=6, topology="random", space="binary")
    assert c[0].read_text() != a[0].read_text()
    wf = resolve_workflow(a[0])  # a generated file loads like any workflow file
    assert wf.vram_budget_mb is not None and wf.decision_space.value == "binary"


def test_budget_tightness_keeps_some_gpu_placement_feasible():
    wf = generate_workflow(tasks=8, topology="fan-out", space="binary", budget_tightness=0.99, seed=0)
    biggest = max(c.vram_needed_mb for c in wf.task_cards.values())
    assert wf.vram_budget_mb >= biggest


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tasks": 0}, "--tasks must be an integer"),
        ({"tasks": 3, "budget_tightness": 1.0}, "--budget-tightness must be in"),
        ({"tasks": 3, "topology": "star"}, "unknown topology 'star'"),
        ({"tasks": 3, "space": "four_way"}, "unknown decision space"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(WorkflowError, match=message):
        generate_workflow(**kwargs)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "0"], "--tasks must be an integer"),
        (["--topology", "star"], "unknown topology"),
        (["--space", "x"], "unknown decision space"),
        (["--budget-tightness", "-0.1"], "--budget-tightness must be in"),
        (["--count", "0"], "--count must be an integer"),
        (["--cards", "nope"], "card set 'nope'"),
    ],
)
def test_cli_bad_arguments_are_one_line(cli, tmp_path, argv, message):
    code, out, err = cli("generate", "--out", str(tmp_path / "g"), *argv)
    assert code == 2 and err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and out == ""


def test_cli_writes_then_bench_takes_the_folder(cli, tmp_path):
    code, out, _ = cli(
        "generate", "--tasks", "4", "--topology", "chain", "--count", "2", "--seed", "1", "--out", str(tmp_path / "g")
    )
    assert code == 0 and len(out.strip().splitlines()) == 2
    code, out, err = cli(
        "bench",
        "--scenarios",
        str(tmp_path / "g"),
        "--policies",
        "heft,agent-plan",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "b"),
        "--no-ablation",
    )
    assert code == 0, err
    assert "gen-chain-binary-n4-s1-0" in out and "gen-chain-binary-n4-s1-1" in out and "agent-plan" in out


def test_bench_empty_folder_is_one_line(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("bench", "--scenarios", str(tmp_path / "empty"), "--out", str(tmp_path / "b"))
    assert code == 2 and "holds no workflow files" in err


def test_bench_scores_a_workflow_too_large_to_enumerate_against_the_best_known(cli, tmp_path):
    cli("generate", "--tasks", "11", "--space", "three_way", "--out", str(tmp_path / "g"))  # 3^11 > 60,000
    code, out, err = cli(
        "bench",
        "--scenarios",
        str(tmp_path / "g"),
        "--policies",
        "heft",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "b"),
        "--no-ablation",
    )
    assert code == 0, err
    assert "no oracle (1.77e+05 mappings); its ratios are over the best known mapping" in " ".join(out.split())
