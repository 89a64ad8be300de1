"""A user tool that fails while being profiled is a one-line error naming the tool and the phase."""

from __future__ import annotations

import textwrap

import pytest

TOOLS = textwrap.dedent("""
    import agentsched


    class Boom(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            raise ValueError("kaboom\\nsecond line")

        def example_inputs(self):
            return {"x": 1}


    class Hungry(agentsched.Tool):
        has_gpu = False

        def load(self, device):
            raise MemoryError("no room for the weights")

        def run(self, inputs):
            return 0

        def example_inputs(self):
            return {"x": 1}


    class BadUnload(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            return 0

        def unload(self):
            raise RuntimeError("unload failed\\nsecond line")

        def example_inputs(self):
            return {"x": 1}


    class Answer(agentsched.Tool):
        has_gpu = False

        def run(self, inputs):
            return 0

        def example_inputs(self):
            return 42
""")


@pytest.fixture
def user_tools(tmp_path, monkeypatch):
    (tmp_path / "mt2.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    "tool, message",
    [
        ("mt2:Boom", "error: tool mt2:Boom failed in run() on cpu: ValueError: kaboom"),
        ("mt2:Hungry", "error: tool mt2:Hungry failed in load() on cpu: MemoryError: no room for the weights"),
        (
            "mt2:Answer",
            (
                "error: tool mt2:Answer: example_inputs() returned int (42), not a dict of the inputs run() "
                "takes: the profiler has nothing to time it on"
            ),
        ),
    ],
)
def test_a_failing_user_tool_is_one_line(user_tools, cli, tool, message):
    out = user_tools / "cards.json"
    code, _, err = cli(
        "profile", "--tools", tool, "--out", str(out), "--runs", "2", "--warmup", "0", "--busy", "ignore"
    )
    assert code != 0
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert lines == [message]
    assert "Traceback" not in err and "internal error" not in err
    assert not out.exists() or out.stat().st_size == 0  # no card file written from a failed run


def test_measure_raises_profile_error(user_tools):
    from agentsched.profiler.profiler import ProfileError, measure

    with pytest.raises(ProfileError, match=r"^tool mt2:Boom failed in run\(\) on cpu: ValueError: kaboom$"):
        measure("mt2:Boom", "cpu", "small", runs=1, warmup=0)


def test_a_tool_whose_unload_raises_is_profiled_with_a_one_line_warning(user_tools, cli, caplog):
    out = user_tools / "cards.json"
    code, _, err = cli(
        "profile", "--tools", "mt2:BadUnload", "--out", str(out), "--runs", "1", "--warmup", "0", "--busy", "ignore"
    )
    assert code == 0 and out.exists() and "Traceback" not in err
    (rec,) = [r for r in caplog.records if "unload() failed" in r.getMessage()]
    assert rec.getMessage() == "tool mt2:BadUnload: unload() failed: RuntimeError: unload failed"
    assert rec.exc_info is None  # before: logged with its whole traceback
