"""The ray testbed's command-line options: one-line errors before any Ray instance starts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("flag", [["--emulate-gpu"], ["--ray-address", "auto"]])
def test_ray_flags_apply_only_to_the_ray_testbed(cli, flag):
    code, out, err = cli("run", "S2", "--policy", "all-gpu", "--rounds", "1", "--no-oracle", *flag)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {flag[0]} applies only to --testbed ray (got sim)"


def test_throughput_runs_on_the_ray_testbed_only(cli):
    code, _, err = cli("throughput", "S2", "--testbed", "local")
    assert code == 2 and err.strip() == "error: throughput runs on --testbed ray only (got local)"


def test_throughput_concurrency_must_be_positive(cli):
    code, _, err = cli("throughput", "S2", "--concurrency", "0")
    assert code == 2 and err.strip() == "error: --concurrency must be >= 1, got 0"


def test_unknown_testbed_lists_ray(cli):
    code, _, err = cli("run", "S2", "--policy", "all-gpu", "--testbed", "nope")
    assert code == 2 and "ray" in err and err.count("\n") == 1
