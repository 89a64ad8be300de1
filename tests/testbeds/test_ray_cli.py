"""The ray testbed's command-line options: one-line errors before any Ray instance starts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "flag,field", [(["--emulate-gpu"], "--emulate-gpu"), (["--ray-address", "auto"], "--ray-address")]
)
def test_ray_flags_apply_only_to_the_ray_testbed(cli, flag, field):
    code, out, err = cli("run", "S2", "--policy", "all-gpu", "--rounds", "1", "--no-oracle", *flag)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {field} applies only to the ray testbed (got sim)"  # the TestbedSpec's, by flag


def test_throughput_runs_on_the_ray_testbed_only(cli):
    code, _, err = cli("throughput", "S2", "--testbed", "local")
    assert code == 2 and err.strip() == (
        "error: Invalid value for '--testbed': 'local' is not one of 'ray'. (see 'agentsched throughput --help')"
    )


def test_throughput_concurrency_must_be_positive(cli):
    code, _, err = cli("throughput", "S2", "--concurrency", "0")
    assert code == 2 and err.strip() == "error: --concurrency must be >= 1, got 0"


def test_unknown_testbed_lists_ray(cli):
    code, _, err = cli("run", "S2", "--policy", "all-gpu", "--testbed", "nope")
    assert code == 2 and "ray" in err and err.count("\n") == 1


def test_throughput_json_is_a_flag_a_path_after_it_points_to_json_out(cli):
    code, out, err = cli("throughput", "S2", "--json", "tp.json")
    assert code == 2 and out == ""
    assert (
        err.count("\n") == 1 and "--json is a flag now (JSON on stdout); to write a file use --json-out tp.json" in err
    )


@pytest.mark.parametrize(
    "address, hp",
    [
        ("auto", None),
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head:10001", ("head", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("head", None),
        ("head:port", None),
        ("user:pw@10.0.0.5:6379", ("10.0.0.5", 6379)),
    ],
)
def test_host_port_of_a_cluster_address(address, hp):
    from agentsched.testbeds.ray import host_port

    assert host_port(address) == hp


def test_an_unreachable_ray_address_is_one_line_naming_it(cli):
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        code, out, err = cli(
            "run",
            "S2",
            "-p",
            "all-gpu",
            "--testbed",
            "ray",
            "--ray-address",
            address,
            "--size",
            "small",
            "--rounds",
            "1",
        )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: cannot join the Ray cluster at {address}: ")


@pytest.mark.parametrize("credentials", ["user:s3cret-pw@", "ray://user:s3cret-pw@"])
def test_credentials_in_a_ray_address_are_never_printed(cli, credentials):
    """Before, an address without a scheme (user:pw@host:port) was printed whole."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"{credentials}127.0.0.1:{s.getsockname()[1]}"
        code, out, err = cli(
            "run",
            "S2",
            "-p",
            "all-gpu",
            "--testbed",
            "ray",
            "--ray-address",
            address,
            "--size",
            "small",
            "--rounds",
            "1",
        )
    assert code == 2 and "s3cret" not in out + err and "user" not in err
    assert "***@127.0.0.1:" in err and "connection refused" in err


def test_address_secrets_and_redaction():
    from agentsched.errors import address_secrets, redact_address

    assert address_secrets("u:p4ss@h:1") == ("u:p4ss", "u", "p4ss") and address_secrets("h:1") == ()
    assert redact_address("u:p4ss@h:1") == "***@h:1" and redact_address("ray://u:p4ss@h:1") == "ray://***@h:1"
    assert redact_address("auto") == "auto"
    assert redact_address("u:p/w@h:1") == "***@h:1"  # a password with a '/': a cluster address has no path


def test_a_results_file_never_keeps_the_credentials_of_a_ray_address():
    from agentsched.testbeds.spec import TestbedSpec

    doc = TestbedSpec(kind="ray", ray_address="user:s3cret@10.0.0.5:6379").to_dict()
    assert doc["ray_address"] == "***@10.0.0.5:6379"


@pytest.mark.parametrize(
    "command", [["invoke", "S2", "--store", "s.db"], ["serve", "S2", "--store", "s.db", "--port", "0"]]
)
def test_invoke_and_serve_join_the_cluster_the_address_names(cli, command, tmp_path, monkeypatch):
    """Before, only run, bench and throughput took --ray-address: invoke and serve started a private Ray."""
    pytest.importorskip("ray")
    pytest.importorskip("fastapi")
    import socket

    monkeypatch.chdir(tmp_path)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        code, out, err = cli(*command, "--testbed", "ray", "--ray-address", address, "--emulate-gpu")
    assert code != 0 and err.startswith(f"error: cannot join the Ray cluster at {address}: "), err
