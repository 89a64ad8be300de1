"""throughput on a user workflow: --input / --inputs-jsonl reach the tools, bad inputs are one line
before Ray starts, and a run with failed invocations exits 1 saying how many."""

from __future__ import annotations

import json
import textwrap

import pytest

TOOLS = textwrap.dedent("""
    import agentsched


    class Upper(agentsched.Tool):
        name = "upper"
        workload = "upper-case the text; 'fail' raises"
        tags = ("compute-light",)
        has_gpu = False
        input_names = ("text",)

        def run(self, inputs):
            if inputs["text"] == "fail":
                raise ValueError("asked to fail")
            return inputs["text"].upper()
""")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "tp_upper_tools.py").write_text(TOOLS)
    (tmp_path / "upper.yaml").write_text('name: upper\ntasks:\n  A: {tool: "tp_upper_tools:Upper"}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_bad_inputs_are_one_line_before_any_cluster(cli, project):
    code, out, err = cli("throughput", "upper.yaml", "--input", "txt=a")
    assert code == 2 and err.count("\n") == 1 and "'txt' is not an input of workflow upper" in err
    code, _, err = cli("throughput", "upper.yaml")
    assert code == 2 and err.count("\n") == 1 and "missing input(s) for source task A" in err
    (project / "in.jsonl").write_text('{"text": "a"}\n\n{"nope": 1}\n')
    code, _, err = cli("throughput", "upper.yaml", "--inputs-jsonl", "in.jsonl")
    assert code == 2 and err.startswith("error: --inputs-jsonl in.jsonl: line 3: ") and err.count("\n") == 1
    code, _, err = cli("throughput", "upper.yaml", "--inputs-jsonl", "in.jsonl", "--input", "text=a")
    assert code == 2 and "give one or the other" in err


@pytest.mark.ray
def test_inputs_reach_the_tools_and_failures_set_the_exit_status(cli, project):
    pytest.importorskip("ray")
    from tests.support.ray_cluster import ray_cluster

    (project / "in.jsonl").write_text(
        "".join(f'{{"text": "{t}"}}\n' for t in ("one", "fail", "two", "three", "unused"))
    )
    with ray_cluster({"num_cpus": 2, "num_gpus": 0}):
        code, out, err = cli("throughput", "upper.yaml", "-k", "2", "--batches", "1", "--input", "text=hi", "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["failed"] == 0 and [e["status"] for e in doc["batches"][0]["executions"]] == ["ok", "ok"]
        # one line per invocation: the warm-up and batch 0 take lines 1-2 (one fails), batch 1 lines 3-4;
        # line 5 is not run
        code, out, err = cli(
            "throughput", "upper.yaml", "-k", "2", "--batches", "2", "--inputs-jsonl", "in.jsonl", "--json"
        )
    assert code == 1
    doc = json.loads(out)
    first, second = (b["executions"] for b in doc["batches"])
    assert doc["failed"] == 2 and [e["status"] for e in first] == ["ok", "error"]
    assert "asked to fail" in first[1]["message"] and [e["status"] for e in second] == ["ok", "ok"]
    assert "note: 1 line(s) of in.jsonl not run" in err
    assert err.strip().splitlines()[-1] == "error: 2 of 6 invocations failed (warm-up batch included)"
