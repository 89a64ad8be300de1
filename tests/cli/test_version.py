"""The version is written once, in pyproject.toml: the package reads it from its installed metadata and
`agentsched --version` prints it."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import agentsched

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_version_flag_prints_the_package_metadata(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"agentsched {metadata.version('agentsched')}"
    assert agentsched.__version__ == metadata.version("agentsched")


def test_installed_metadata_is_pyproject_version():
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    installed = metadata.version("agentsched")
    assert installed == declared, (
        f"installed metadata says {installed}, pyproject.toml {declared}: reinstall (pip install -e .)"
    )
