"""Input sizes: the tool API's size(inputs), its byte-length default, and its bounded fallbacks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentsched.errors import ToolError
from agentsched.model.execution import TaskSpan
from agentsched.model.sizes import MAX_ITEMS, byte_size, measure_size
from agentsched.model.tool import Tool, check_declared
from agentsched.model.workflow import Mode


class Plain(Tool):
    def run(self, inputs):
        return inputs


class Audio(Tool):
    size_unit = "audio_s"

    def run(self, inputs):
        return inputs

    def size(self, inputs):
        return len(inputs["wave"]) / 16_000


class Broken(Tool):
    size_unit = "pages"

    def run(self, inputs):
        return inputs

    def size(self, inputs):
        raise RuntimeError("no pages\nhere")


class Negative(Broken):
    def size(self, inputs):
        return -3.0


def test_default_size_is_the_byte_length():
    got = measure_size(Plain(), {"text": "héllo", "blob": b"\x00" * 10, "arr": np.zeros(4, dtype=np.float32)})
    # keys count too: "text" 4 + "héllo" 6, "blob" 4 + 10, "arr" 3 + 16
    assert got.unit == "bytes" and got.exact and got.value == 4 + 6 + 4 + 10 + 3 + 16 and not got.fallback


def test_declared_size_and_unit_are_used():
    got = measure_size(Audio(), {"wave": [0.0] * 32_000})
    assert (got.value, got.unit, got.exact, got.fallback) == (2.0, "audio_s", True, "")


@pytest.mark.parametrize("tool", [Broken(), Negative()])
def test_a_failing_size_falls_back_to_bytes_marked(tool):
    got = measure_size(tool, {"doc": "abc"})
    assert got.unit == "bytes" and got.value == 6 and got.fallback.startswith("size() ")
    assert "\n" not in got.fallback  # one line


def test_odd_inputs_are_bounded_and_marked():
    class Weird:
        def __repr__(self):
            raise ValueError("no repr")

    cyclic: list = []
    cyclic.append(cyclic)
    for odd in ({"w": Weird()}, {"c": cyclic}, {"n": float("nan")}, {"s": "\ud800"}, {"o": object()}):
        got = byte_size(odd)
        assert math.isfinite(got.value) and got.value >= 0
    assert not byte_size({"o": object()}).exact and not byte_size({"c": cyclic}).exact
    assert byte_size({"s": "\ud800"}).value > 0  # a lone surrogate still counts


def test_large_containers_are_walked_within_a_budget():
    big = list(range(MAX_ITEMS * 5))
    got = byte_size({"rows": big})
    assert not got.exact and got.value == pytest.approx(8 * len(big) + 4, rel=0.01)


def test_size_unit_is_checked_where_declared():
    class Bad(Plain):
        size_unit = ("pages",)  # type: ignore[assignment]

    with pytest.raises(ToolError, match="size_unit"):
        check_declared(Bad, "m:Bad")


def test_builtin_tools_count_their_unit():
    tools = pytest.importorskip("agentsched.tools")
    minilm = tools.get_tool("minilm_l6", "small")
    assert measure_size(minilm, {"texts": ["a b", "c", "d"]}).value == 3
    assert measure_size(minilm, {}).value == minilm.params["batch"]  # the generated batch
    log = tools.get_tool("log_analyzer", "small")
    assert (measure_size(log, {"log": "x\ny\nz"}).value, log.size_unit) == (3, "lines")
    whisper = tools.get_tool("whisper_base_x2", "small")
    assert measure_size(whisper, {}).unit == "audio_s" and whisper.with_size(4).params["audio_s"] == 4.0
    assert tools.get_tool("clip", "small").with_size(7.6).params["batch"] == 8


def test_span_records_the_size_only_when_measured():
    span = TaskSpan("A", "clip", Mode.CPU, 0.0, 0.0, 5.0)
    assert "size" not in span.to_dict()
    sized = TaskSpan("A", "clip", Mode.CPU, 0.0, 0.0, 5.0, size=12.0, size_unit="images")
    assert sized.to_dict()["size"] == 12.0 and sized.to_dict()["size_unit"] == "images"


def test_numpy_numbers_from_size_are_accepted():
    class Rows(Plain):
        size_unit = "rows"

        def size(self, inputs):
            return np.int64(len(inputs["rows"]))

    got = measure_size(Rows(), {"rows": [1, 2, 3]})
    assert (got.value, got.unit, got.fallback) == (3.0, "rows", "") and isinstance(got.value, float)
