"""The CLI: stable JSON output and one-line errors for every bad input."""

import json

import pytest


def test_scenarios_json(cli):
    code, out, _ = cli("scenarios", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows][:3] == ["S1", "S2", "S3"]
    assert rows[12]["tools"] == ["clip_x12", "bert_base_x12", "whisper_base_x4", "groupby_x60"]


def test_show_lists_cards_and_budget(cli):
    code, out, _ = cli("show", "S13")
    assert code == 0
    assert "1100 MB" in out and "1645 MB" in out and "bert_base_x12" in out


def test_show_gives_no_time_for_a_tool_that_was_never_profiled(cli, tmp_path):
    code, out, _ = cli("show", _wf(tmp_path, 'name: u\ntasks:\n  A: {tool: "nowhere_tools:Slow"}\n  B: groupby\n'))
    assert code == 0
    row_a = next(line for line in out.splitlines() if "nowhere_tools:Slow" in line)
    row_b = next(line for line in out.splitlines() if "groupby" in line)
    assert [c.strip() for c in row_a.split("│")][4] == "?"  # before: "1", the cold start's placeholder
    assert [c.strip() for c in row_b.split("│")][4] not in ("?", "-")
    # before: "total VRAM if all on GPU: 0 MB; cards: a5500", as if the set held the user tool
    assert (
        "total VRAM if all on GPU: unknown (1 task not profiled); cards: a5500 (no card for 1 of 2 tasks: "
        "agentsched profile writes them)" in " ".join(out.split())
    )
    code, out, _ = cli("show", str(tmp_path / "w.yaml"), "--json")
    doc = json.loads(out)
    assert doc["total_vram_mb"] is None and doc["unprofiled"] == ["A"]
    assert json.loads(cli("show", "S13", "--json")[1])["total_vram_mb"] == 1645


def test_show_gives_no_vram_or_load_for_a_card_without_a_gpu_implementation(cli, tmp_path):
    (tmp_path / "c.json").write_text('{"cards": {"parse": {"cpu_ms": 90, "vram_mb": 100, "load_ms": 40}}}')
    code, out, err = cli("show", _wf(tmp_path, "name: p\ncards: c.json\ntasks:\n  A: parse\n"))
    assert code == 0, err
    row = [c.strip() for c in next(ln for ln in out.splitlines() if "parse" in ln).split("│")]
    assert row[5:9] == ["-", "-", "-", "-"]  # gpu ms, speedup, load ms, VRAM MB (before: 40 and 100, never used)
    assert "total VRAM if all on GPU: 0 MB" in " ".join(out.split())


def test_simulate_json_is_stable(cli):
    code, out, _ = cli(
        "simulate", "S13", "--mapping", "A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu", "--noise", "0", "--json"
    )
    d = json.loads(out)
    assert code == 0
    assert set(d) == {"mapping", "status", "e2e_ms", "elapsed_ms", "peak_vram_mb", "message", "testbed", "timeline"}
    assert d["mapping"] == {"A": "gpu_now", "B": "gpu_queue", "C": "gpu_now", "D": "cpu"}
    assert d["status"] == "ok" and d["peak_vram_mb"] == 1098
    b = next(s for s in d["timeline"] if s["task"] == "B")
    assert b["load_ms"] == 481 and b["start_ms"] > 0  # waited for VRAM, then loaded


def test_simulate_oom_json(cli):
    code, out, _ = cli("simulate", "S13", "-m", "A=gpu_now,B=gpu_now,C=gpu_now,D=cpu", "--json")
    d = json.loads(out)
    assert code == 0 and d["status"] == "oom" and d["e2e_ms"] is None and d["peak_vram_mb"] > 1100


def test_simulate_gantt(cli, tmp_path):
    png = tmp_path / "g.png"
    code, out, _ = cli("simulate", "S13", "-m", "A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu", "--gantt", str(png))
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_oracle_json(cli):
    code, out, _ = cli("oracle", "S13", "--json", "--top", "3")
    d = json.loads(out)
    assert code == 0 and d["mappings_total"] == 81 and len(d["top"]) == 3
    top = d["top"]
    assert all(set(e) == {"mapping", "e2e_ms", "status", "peak_vram_mb"} for e in top)
    assert top[0]["e2e_ms"] <= top[1]["e2e_ms"] <= top[2]["e2e_ms"]
    assert top[0]["mapping"] == {"A": "gpu_now", "B": "gpu_queue", "C": "gpu_now", "D": "cpu"}


def test_calibrate_json(cli):
    code, out, _ = cli("calibrate", "--json")
    d = json.loads(out)
    assert code == 0 and d["reproduced"] == 13 and d["s5_latency_mape"] < 0.2


def _wf(tmp_path, text):
    p = tmp_path / "w.yaml"
    p.write_text(text)
    return str(p)


BAD = [
    (["simulate", "nofile.yaml", "-m", "A=cpu"], "workflow file not found"),
    (["show", "S99"], "neither a built-in scenario"),
    (["simulate", "S5", "-m", "A=gpu,B=gpu,C=cpu"], "misses task(s) D"),
    (["simulate", "S5", "-m", "A=gpu,B=gpu,C=cpu,D=gpu,Q=cpu"], "unknown task(s) Q"),
    (["simulate", "S5", "-m", "A=gpu,B=gpu,C=cpu,D=gpu_queue"], "outside the binary decision space"),
    (
        ["simulate", "S5", "-m", "A=gpu,B=gpu,C=cpu,D=gpu", "--testbed", "cloud"],
        "'cloud' is not one of 'sim', 'local', 'ray'",
    ),
    (["oracle", "S5", "--top", "0"], "--top must be >= 1"),
    (["show", "S5", "--cards", "nosuchcards"], "neither a built-in set"),
    (["simulate", "S5"], "Missing option '--mapping'"),
    (["oracle", "S5", "--top", "x"], "Invalid value for '--top'"),
    (["nosuch"], "No such command 'nosuch'"),
    (["simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--gantt", "x.txt"], "unsupported format"),
    (["simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--gantt", "/nonexistent/x.png"], "does not exist"),
    (["simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--noise", "nan"], "--noise must be a number in [0, 1]"),
    (["simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--noise", "400"], "--noise must be a number in [0, 1]"),
    (["simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--cpu-slots", "0"], "--cpu-slots must be an integer >= 1"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_gives_one_line_error(cli, argv, needle):
    code, out, err = cli(*argv)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert "Traceback" not in err


BAD_FILES = [
    ("tasks: [A: {tool: clip]", "invalid YAML"),
    ("tasks: {A: {tool: clip}, B: {tool: clip}}\nedges: [[A, B], [B, A]]", "cycle"),
    ("tasks: {A: {tool: nope}}", "unknown tool 'nope'"),
    ("tasks: {A: {tool: clip}}\nedges: [[A, Z]]", "unknown task 'Z'"),
    (
        "tasks: {A: {tool: clip}}\nvram_budget_mb: -1",
        "vram_budget_mb must be a finite number > 0 (none: omit it), got -1",
    ),
    ("tasks: {A: {tool: clip}}\nvram_budget_mb: 5", "below every tool's VRAM"),
]


@pytest.mark.parametrize("text,needle", BAD_FILES)
def test_bad_workflow_file_gives_one_line_error(cli, tmp_path, text, needle):
    code, _, err = cli("show", _wf(tmp_path, text))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_oracle_over_the_mapping_limit_is_one_line(cli, tmp_path):
    tasks = "\n".join(f"  T{i}: {{tool: groupby}}" for i in range(11))
    code, _, err = cli("oracle", _wf(tmp_path, f"decision_space: three_way\ntasks:\n{tasks}"))
    assert code == 2
    assert err.strip() == "error: brute force over 11 tasks is too large (3^11 = 177,147 mappings; limit 60,000)"


def test_gantt_to_a_folder_is_refused_before_running(cli, tmp_path):
    code, out, err = cli("simulate", "S5", "-m", "A=cpu,B=cpu,C=cpu,D=cpu", "--gantt", str(tmp_path))
    assert code == 2 and out == "" and "is a folder" in err


@pytest.mark.parametrize("name", ["[bold", "[/]", "[red]A[/red]"])
def test_markup_like_names_print_as_themselves(cli, tmp_path, name):
    # task names may not hold '[' (docs/workflows.md); a workflow name and description may
    code, out, err = cli("show", _wf(tmp_path, f"name: '{name}'\ndescription: '{name}'\ntasks: {{A: {{tool: clip}}}}"))
    assert code == 0 and out.count(name) >= 2, err
    code, out, err = cli("show", _wf(tmp_path, f"tasks: {{'{name}': {{tool: clip}}}}"))
    assert code == 2 and "is not allowed" in err


def test_non_regular_and_binary_input_files(cli, tmp_path):
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    code, _, err = cli("show", str(fifo))
    assert code == 2 and "not a regular file" in err
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    code, _, err = cli("show", str(binary))
    assert code == 2 and "not UTF-8 text" in err
    code, _, err = cli("show", "S13", "--cards", "/dev/zero")
    assert code == 2 and err.strip() == "error: card file /dev/zero: not a regular file"
    from agentsched.model.files import read_small_text

    with pytest.raises(ValueError, match=r": does not exist$"):  # before: "not a regular file"
        read_small_text(tmp_path / "none.jsonl", "--inputs-jsonl file")
