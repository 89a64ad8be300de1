"""The simulator is refused for user tools without cards: it would print placeholder times as real."""

from __future__ import annotations

import pytest

from agentsched import Runtime
from agentsched.errors import TestbedError
from agentsched.model.workflow_io import load_workflow_file
from agentsched.testbeds.sim import SimTestbed

MESSAGE = (
    r"^the sim testbed needs profiled cards for user tools, but task\(s\) A, B, C have none \(its times "
    r"would be placeholders\): profile them with `agentsched profile --tools "
    r"wordtools:Count,wordtools:Shout,wordtools:Split --out cards.json`"
)


@pytest.mark.parametrize("testbed", ["sim", SimTestbed(noise_sigma=0.0)], ids=["by-name", "instance"])
def test_sim_on_unprofiled_user_tools_is_refused(on_path, tmp_path, testbed):
    wf = load_workflow_file(on_path / "words.yaml")
    with pytest.raises(TestbedError, match=MESSAGE):
        Runtime(wf, store=tmp_path / "s.db", testbed=testbed)
    assert not (tmp_path / "s.db").exists()  # refused before the store was created


def test_cli_invoke_on_sim_is_one_line(on_path, tmp_path, cli):
    code, out, err = cli(
        "invoke",
        str(on_path / "words.yaml"),
        "--input",
        "text=a b",
        "--store",
        str(tmp_path / "s.db"),
        "--testbed",
        "sim",
    )
    assert code != 0 and "E2E" not in out
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error: the sim testbed needs profiled cards for user tools")


def test_sim_with_cards_still_runs(on_path, tmp_path):
    from agentsched.model.cards import CardSet, ToolCard

    wf = load_workflow_file(on_path / "words.yaml")
    cards = CardSet(
        name="words",
        source="test",
        cards={
            t: ToolCard(name=t, cpu_ms=ms, workload="w", tags=("compute-light",))
            for t, ms in (("wordtools:Split", 1.0), ("wordtools:Count", 2.0), ("wordtools:Shout", 3.0))
        },
    )
    with Runtime(wf.with_cards(cards), store=None, testbed=SimTestbed(noise_sigma=0.0)) as rt:
        res = rt.invoke(text="a b")
    assert res.ok and res.e2e_ms == pytest.approx(4.0, abs=0.5)  # A then the longer of B, C: the cards' times


TESTBED_OR_CARDS = "and pass --cards cards.json, or use --testbed local"


@pytest.mark.parametrize(
    "argv, remedy",
    [
        (("run", "{wf}", "--policy", "heft", "--rounds", "1"), TESTBED_OR_CARDS),
        (("simulate", "{wf}", "--mapping", "A=cpu,B=cpu,C=cpu"), TESTBED_OR_CARDS),
        (("oracle", "{wf}"), TESTBED_OR_CARDS),
        (
            ("bench", "--scenarios", "{wf}", "--policies", "heft", "--seeds", "1", "--rounds", "1", "--out", "{tmp}/b"),
            TESTBED_OR_CARDS,
        ),
        (("ablation", "{wf}", "--rounds", "1", "--seeds", "1"), "and pass --cards cards.json (the ablation runs on"),
        (
            ("agent-check", "{wf}", "--rounds", "1", "--seeds", "1"),
            "and name that card file in the workflow's `cards:`",
        ),
        (("load", "{wf}", "--load", "0.3", "--duration-s", "5", "--out", "{tmp}/l"), "and name that card file in the"),
    ],
    ids=lambda a: a[0] if isinstance(a, tuple) else "",
)
def test_every_command_on_the_simulator_refuses_unprofiled_user_tools(on_path, tmp_path, cli, argv, remedy):
    """(Before, only invoke refused: run, bench, simulate and oracle printed placeholder E2Es as real;
    each names what that command's options allow.)"""
    args = [a.format(wf=on_path / "words.yaml", tmp=tmp_path) for a in argv]
    code, out, err = cli(*args)
    assert code != 0 and "E2E" not in out and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: the sim testbed needs profiled cards for user tools") and remedy in err
