"""Vision models: resnet50 (ResNet-50 classifier), clip (ViT-B/32 image-text matching), ocr (TrOCR).

Random seeded weights on the real architectures. ``ocr`` has TrOCR-small-handwritten's shape
(DeiT-small encoder, 256-wide decoder): its ~62M fp32 parameters match the paper's 248 MB VRAM.
Images are generated (gradients and a rectangle; a rendered text line for OCR) and normalised at load.
"""

from __future__ import annotations

from typing import Any

from agentsched.tools import inputs
from agentsched.tools.base import Size, Tool


def _pixels(images_u8: Any, mean: float, std: float) -> Any:
    """(n, H, W, 3) uint8 -> (n, 3, H, W) float32, normalised."""
    import torch

    x = torch.from_numpy(images_u8).permute(0, 3, 1, 2).float() / 255.0
    return (x - mean) / std


class ResNet50(Tool):
    """ResNet-50 image classification: returns {"logits": (n, classes), "top1": (n,)}."""

    name = "resnet50"
    size_param = "batch"
    size_unit = "images"
    family = "vision"
    SIZES = {
        Size.PAPER: {"config": {"num_labels": 1000}, "batch": 4, "image": 224},  # ResNetConfig() is ResNet-50
        Size.SMALL: {
            "config": {
                "embedding_size": 8,
                "hidden_sizes": [16, 32],
                "depths": [1, 1],
                "layer_type": "basic",
                "num_labels": 10,
            },
            "batch": 2,
            "image": 32,
        },
    }

    def _load(self, device: str) -> None:
        from transformers import ResNetConfig, ResNetForImageClassification

        from agentsched.tools._torch import build_random

        p = self.params
        cfg = ResNetConfig(**p["config"])
        self._m_model = build_random(ResNetForImageClassification, cfg, self.sub_seed("weights")).to(device)
        imgs = inputs.images(p["batch"], p["image"], p["image"], self.sub_seed("inputs"))
        self._m_pixels = _pixels(imgs, 0.45, 0.225).to(device)

    def _call(self) -> dict[str, Any]:
        import torch

        with torch.inference_mode():
            logits = self._m_model(pixel_values=self._m_pixels).logits
        return {"logits": logits, "top1": logits.argmax(-1)}


class Clip(Tool):
    """CLIP ViT-B/32: image-text similarity of n images x n captions -> {"logits_per_image", "best_text"}."""

    name = "clip"
    size_param = "batch"
    size_unit = "images"
    family = "vision"
    SIZES = {
        Size.PAPER: {
            "config": {
                "text_config": {
                    "hidden_size": 512,
                    "intermediate_size": 2048,
                    "num_attention_heads": 8,
                    "num_hidden_layers": 12,
                    "vocab_size": 49408,
                    "max_position_embeddings": 77,
                },
                "vision_config": {
                    "hidden_size": 768,
                    "intermediate_size": 3072,
                    "num_attention_heads": 12,
                    "num_hidden_layers": 12,
                    "image_size": 224,
                    "patch_size": 32,
                },
                "projection_dim": 512,
            },
            "batch": 4,
            "seq_len": 77,
        },
        Size.SMALL: {
            "config": {
                "text_config": {
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_attention_heads": 2,
                    "num_hidden_layers": 2,
                    "vocab_size": 30522,
                    "max_position_embeddings": 16,
                },
                "vision_config": {
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_attention_heads": 2,
                    "num_hidden_layers": 2,
                    "image_size": 32,
                    "patch_size": 8,
                },
                "projection_dim": 16,
            },
            "batch": 2,
            "seq_len": 16,
        },
    }

    def _load(self, device: str) -> None:
        from transformers import CLIPConfig, CLIPModel

        from agentsched.tools._torch import build_random
        from agentsched.tools.text import bert_tokenizer

        p = self.params
        cfg = CLIPConfig(**p["config"])
        self._m_model = build_random(CLIPModel, cfg, self.sub_seed("weights")).to(device)
        side = cfg.vision_config.image_size
        imgs = inputs.images(p["batch"], side, side, self.sub_seed("images"))
        self._m_pixels = _pixels(imgs, 0.48, 0.27).to(device)
        # Captions with the shared BERT tokenizer: its ids fit CLIP's larger vocabulary.
        caps = inputs.sentences(p["batch"], self.sub_seed("captions"))
        enc = bert_tokenizer()(
            caps, padding="max_length", truncation=True, max_length=p["seq_len"], return_tensors="pt"
        )
        self._m_ids = enc["input_ids"].to(device)
        self._m_mask = enc["attention_mask"].to(device)

    def _call(self) -> dict[str, Any]:
        import torch

        with torch.inference_mode():
            out = self._m_model(input_ids=self._m_ids, attention_mask=self._m_mask, pixel_values=self._m_pixels)
        return {"logits_per_image": out.logits_per_image, "best_text": out.logits_per_image.argmax(-1)}


class Ocr(Tool):
    """TrOCR: a text-line image in, ``new_tokens`` decoded token ids out (count forced)."""

    name = "ocr"
    size_param = "batch"
    size_unit = "images"
    family = "vision"
    SIZES = {
        Size.PAPER: {
            "encoder": {
                "hidden_size": 384,
                "num_hidden_layers": 12,
                "num_attention_heads": 6,
                "intermediate_size": 1536,
                "image_size": 384,
                "patch_size": 16,
            },
            "decoder": {
                "d_model": 256,
                "decoder_layers": 6,
                "decoder_attention_heads": 8,
                "decoder_ffn_dim": 1024,
                "vocab_size": 64044,
                "max_position_embeddings": 512,
            },
            "batch": 1,
            "new_tokens": 16,
        },
        Size.SMALL: {
            "encoder": {
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "image_size": 64,
                "patch_size": 16,
            },
            "decoder": {
                "d_model": 32,
                "decoder_layers": 2,
                "decoder_attention_heads": 2,
                "decoder_ffn_dim": 64,
                "vocab_size": 512,
                "max_position_embeddings": 64,
            },
            "batch": 1,
            "new_tokens": 6,
        },
    }

    def _load(self, device: str) -> None:
        import numpy as np
        from transformers import TrOCRConfig, VisionEncoderDecoderConfig, VisionEncoderDecoderModel, ViTConfig

        from agentsched.tools._torch import build_random, quiet_transformers

        quiet_transformers()
        p = self.params
        cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(
            ViTConfig(**p["encoder"]), TrOCRConfig(**p["decoder"])
        )
        cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = 2, 1, 2
        self._m_model = build_random(VisionEncoderDecoderModel, cfg, self.sub_seed("weights")).to(device)
        side = p["encoder"]["image_size"]
        line = inputs.sentence(__import__("random").Random(self.sub_seed("inputs")))
        img = np.stack([inputs.text_line_image(line, side, side)] * p["batch"])
        self._m_pixels = _pixels(img, 0.5, 0.5).to(device)
        self.text = line  # what the image shows (random weights cannot read it back)

    def _call(self) -> Any:
        import torch
        from transformers import GenerationConfig

        n = self.params["new_tokens"]
        gen = GenerationConfig(
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            decoder_start_token_id=2,
            pad_token_id=1,
            eos_token_id=None,
            bos_token_id=None,
        )
        with torch.inference_mode():
            out = self._m_model.generate(self._m_pixels, generation_config=gen)
        return out[:, 1:]  # drop the decoder start token


TOOLS = [ResNet50, Clip, Ocr]
