"""Llama-3.2 1B/3B generation (random weights, the real architectures), in bfloat16.

bf16 because the paper's VRAM (2484 MB, 6440 MB) is the half-precision footprint and because the
3B model needs ~14 GB in fp32. The prompt is seeded random token ids (no Llama tokenizer can be
downloaded). Random weights may emit EOS at any step, so the token count is forced
(``min_new_tokens == max_new_tokens``): every call does the same work.
"""

from __future__ import annotations

from typing import Any

from agentsched.tools.base import Size, Tool

# Llama-3.2 architecture shared by both sizes (values of the public configs)
_LLAMA32 = {
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "head_dim": 64,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
}
_TINY = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}


class _Llama(Tool):
    """Greedy generation of ``new_tokens`` tokens after a ``prompt_len``-token prompt."""

    family = "llm"

    def _load(self, device: str) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        from agentsched.tools._torch import build_random, generator, quiet_transformers

        quiet_transformers()
        p = self.params
        cfg = LlamaConfig(**p["config"])
        model = build_random(LlamaForCausalLM, cfg, self.sub_seed("weights"), dtype=torch.bfloat16)
        self._m_model = model.to(device)
        ids = torch.randint(
            10, cfg.vocab_size, (p["batch"], p["prompt_len"]), generator=generator(self.sub_seed("inputs"))
        )
        self._m_ids = ids.to(device)
        self._m_mask = torch.ones_like(self._m_ids)

    def _call(self) -> Any:
        import torch
        from transformers import GenerationConfig

        n = self.params["new_tokens"]
        gen = GenerationConfig(
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
            eos_token_id=None,
            bos_token_id=None,
        )
        with torch.inference_mode():
            out = self._m_model.generate(self._m_ids, attention_mask=self._m_mask, generation_config=gen)
        return out[:, self._m_ids.shape[1] :]  # the generated tokens only


class Llama1B(_Llama):
    name = "llama_1b"
    size_param = "prompt_len"
    size_unit = "prompt_tokens"
    SIZES = {
        Size.PAPER: {
            "config": dict(
                _LLAMA32,
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
            ),
            "batch": 1,
            "prompt_len": 32,
            "new_tokens": 16,
        },
        Size.SMALL: {"config": _TINY, "batch": 1, "prompt_len": 16, "new_tokens": 8},
    }


class Llama3B(_Llama):
    name = "llama_3b"
    size_param = "prompt_len"
    size_unit = "prompt_tokens"
    SIZES = {
        Size.PAPER: {
            "config": dict(
                _LLAMA32,
                hidden_size=3072,
                intermediate_size=8192,
                num_hidden_layers=28,
                num_attention_heads=24,
                num_key_value_heads=8,
                head_dim=128,
            ),
            "batch": 1,
            "prompt_len": 32,
            "new_tokens": 16,
        },
        Size.SMALL: {"config": dict(_TINY, num_hidden_layers=3), "batch": 1, "prompt_len": 16, "new_tokens": 8},
    }


TOOLS = [Llama1B, Llama3B]
