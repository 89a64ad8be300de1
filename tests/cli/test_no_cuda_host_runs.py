"""Without CUDA, `run --testbed local` and `invoke` behave alike: GPU placements run as host code,
said once in one note line (never a hint to "map every task to cpu", which `run` cannot do)."""

from __future__ import annotations

import textwrap

import pytest

from agentsched.testbeds.real import NO_CUDA_NOTE

TOOLS = textwrap.dedent("""
    import agentsched


    class Up(agentsched.Tool):
        name = "up"
        workload = "upper-case a text"
        tags = ("compute-light",)
        has_gpu = True  # a GPU version exists; without CUDA it runs as host code
        input_names = ("text",)

        def load(self, device):
            self.device = device

        def run(self, inputs):
            return str(inputs.get("text", "x")).upper() + "@" + self.device
""")


@pytest.fixture
def gpu_project(tmp_path, monkeypatch):
    from agentsched.testbeds.local import LocalBackend

    monkeypatch.setattr(LocalBackend, "_real_cuda", staticmethod(lambda: False))
    (tmp_path / "nocuda_tools.py").write_text(TOOLS)
    (tmp_path / "up.yaml").write_text(
        'name: up\ntasks:\n  A: {tool: "nocuda_tools:Up"}\n  B: {tool: "nocuda_tools:Up"}\nedges: [[A, B]]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if "CUDA" in line]


def test_run_local_without_cuda_runs_gpu_placements_on_the_host(gpu_project, cli):
    code, out, err = cli(
        "run",
        str(gpu_project / "up.yaml"),
        "-p",
        "all-gpu",
        "--testbed",
        "local",
        "--rounds",
        "1",
        "--repeats",
        "1",
        "--no-oracle",
    )
    assert code == 0, err
    assert _notes(out + err) == [f"note: {NO_CUDA_NOTE}"]
    assert "R0" in out and " ok" in out


def test_invoke_without_cuda_says_the_same_once(gpu_project, cli):
    code, out, err = cli("invoke", str(gpu_project / "up.yaml"), "--store", str(gpu_project / "s.db"), "-i", "text=hi")
    assert code == 0, err
    assert _notes(out + err) == [f"note: {NO_CUDA_NOTE}"]
    assert 'output B: "X@cpu"' in out  # B ran its host code (B's input is A's output, not text)
    code, out, err = cli(
        "invoke", str(gpu_project / "up.yaml"), "--store", str(gpu_project / "s.db"), "-i", "text=hi", "--json"
    )
    assert code == 0, err
    assert _notes(err) == [f"note: {NO_CUDA_NOTE}"] and "CUDA" not in out  # stdout: the JSON alone
