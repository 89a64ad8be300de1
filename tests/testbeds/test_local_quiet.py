"""The local testbed checks for CUDA before loading any tool, and tool loading prints no warnings."""

from __future__ import annotations

import logging
import warnings

import pytest

from agentsched.errors import TestbedError
from agentsched.model.workflow import Mode
from agentsched.scenarios import load_scenario


def test_gpu_check_comes_before_any_tool_is_built():
    from agentsched.testbeds.local import LocalTestbed

    built = []
    tb = LocalTestbed(size="small", device="cpu", tool_factory=lambda name, size, seed=0: built.append(name))
    wf = load_scenario("S2")
    with pytest.raises(TestbedError, match="has no CUDA GPU"):
        tb.preflight(wf)
    with pytest.raises(TestbedError, match="has no CUDA GPU"):
        tb.run(wf, {t: Mode.GPU_NOW for t in wf.task_ids})
    assert built == []


def test_tool_loading_emits_no_python_warnings(recwarn, capsys):
    from agentsched.testbeds.local import LocalTestbed
    from agentsched.tools import get_tool

    def factory(name, size, seed=0):
        warnings.warn("some FutureWarning a library raises at import", FutureWarning, stacklevel=1)
        return get_tool(name, size, seed=seed)

    wf = load_scenario("S2")
    tb = LocalTestbed(size="small", tool_factory=factory)
    try:
        tb.run(wf, {t: Mode.CPU for t in wf.task_ids})
    finally:
        tb.close()
    assert [str(w.message) for w in recwarn] == []
    assert capsys.readouterr().err == ""


def test_quiet_loading_sets_transformers_to_errors_only():
    transformers = pytest.importorskip("transformers")
    from agentsched.testbeds.real import quiet_loading

    transformers.utils.logging.set_verbosity_warning()
    with quiet_loading():
        assert transformers.utils.logging.get_verbosity() == logging.ERROR
