"""The options several commands share (cli/options.py): each flag written once."""

from __future__ import annotations

from dataclasses import fields

import typer

from agentsched.cli.common import FLAG_OF_FIELD
from agentsched.cli.main import app
from agentsched.testbeds.spec import TestbedSpec


def _flags(command: str) -> set[str]:
    """The flags ``agentsched COMMAND`` accepts, as click parses them."""
    return {flag for p in typer.main.get_command(app).commands[command].params for flag in p.opts}


def test_every_testbed_spec_field_names_a_flag_the_cli_accepts():
    assert set(FLAG_OF_FIELD) == {f.name for f in fields(TestbedSpec)}  # a new field needs its option
    accepted = _flags("run")  # run takes the whole spec
    assert {field: flag for field, flag in FLAG_OF_FIELD.items() if flag not in accepted} == {}
    assert FLAG_OF_FIELD["cpu_slots"] == "--cpu-slots" and FLAG_OF_FIELD["timeout_s"] == "--task-timeout-s"
