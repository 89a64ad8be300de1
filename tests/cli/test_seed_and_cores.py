"""One meaning of --seed, and static schedulers planning the CPU cores --cpu-slots gives the testbed."""

from __future__ import annotations

import json

from agentsched.cli.policy_opts import PolicyFlags, policy_options
from agentsched.loop.runner import noise_stream, policy_stream


def test_cpu_cores_follow_cpu_slots_for_planners_only():
    assert policy_options(["heft"], PolicyFlags(cpu_slots=2)) == {"heft": {"cpu_cores": 2}}
    both = policy_options(["heft-cf", "ucb1"], PolicyFlags(cpu_slots=3, items=("contention_factor=0.5",)))
    assert both == {"heft-cf": {"cpu_cores": 3, "contention_factor": 0.5}}
    assert policy_options(["ucb1"], PolicyFlags(cpu_slots=2)) == {}
    assert policy_options(["heft"], PolicyFlags()) == {}


def test_bench_passes_cpu_slots_to_heft(cli, tmp_path):
    code, _, err = cli(
        "bench",
        "--scenarios",
        "S5",
        "--policies",
        "heft,ucb1",
        "--seeds",
        "1",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--cpu-slots",
        "1",
        "--no-ablation",
        "--out",
        str(tmp_path / "b"),
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "b" / "results.json").read_text())
    assert doc["config"]["policy_options"] == {"heft": {"cpu_cores": 1}}


def test_seed_streams_are_independent_and_reproducible():
    assert noise_stream(3).random() == noise_stream(3).random()
    assert noise_stream(3).random() != policy_stream(3).random()


def test_simulate_uses_the_noise_stream_of_its_seed(cli):
    outs = [cli("simulate", "S5", "--mapping", "A=gpu,B=gpu,C=gpu,D=cpu", "--seed", s, "--json")[1] for s in "112"]
    e2e = [json.loads(o)["e2e_ms"] for o in outs]
    assert e2e[0] == e2e[1] != e2e[2]


def test_cards_without_any_gpu_figure_get_a_note(cli, tmp_path):
    cards = tmp_path / "cpu.json"
    cards.write_text(
        json.dumps(
            {
                "name": "cpuonly",
                "cards": {
                    "minilm_l6": {"cpu_ms": 10},
                    "reranker": {"cpu_ms": 20},
                    "doc_merger": {"cpu_ms": 30},
                    "groupby": {"cpu_ms": 5},
                },
            }
        )
    )
    code, out, err = cli("oracle", "S2", "--cards", str(cards), "--json")
    assert code == 0, err
    assert "note: card set cpuonly has no GPU figures for any task of S2" in err
    json.loads(out)  # stdout stays pure JSON
    code, _, err = cli("oracle", "S2", "--json")
    assert "no GPU figures" not in err
