"""Audio tools: whisper_base (Whisper-Base ASR, random weights) and audio_features (STFT + MFCC).

Audio is synthetic (tones under a syllable envelope, seeded). ``whisper_base`` builds the base
shape explicitly (``WhisperConfig()`` defaults to tiny) and forces the decoded token count.
``audio_features`` is plain torch: power spectrogram, HTK mel filterbank, log, DCT-II.
"""

from __future__ import annotations

import math
from typing import Any

from agentsched.tools import inputs
from agentsched.tools.base import Size, Tool

SAMPLE_RATE = 16_000  # Hz, Whisper's rate


class WhisperBase(Tool):
    """Log-mel features of a clip -> ``new_tokens`` greedy-decoded token ids."""

    name = "whisper_base"
    size_param = "audio_s"
    size_unit = "audio_s"
    family = "audio"
    SIZES = {
        Size.PAPER: {
            "config": {
                "d_model": 512,
                "encoder_layers": 6,
                "decoder_layers": 6,
                "encoder_attention_heads": 8,
                "decoder_attention_heads": 8,
                "encoder_ffn_dim": 2048,
                "decoder_ffn_dim": 2048,
                "num_mel_bins": 80,
                "vocab_size": 51865,
                "max_source_positions": 1500,
                "max_target_positions": 448,
            },
            "chunk_s": 30,
            "audio_s": 10.0,
            "new_tokens": 16,
        },
        Size.SMALL: {
            "config": {
                "d_model": 32,
                "encoder_layers": 2,
                "decoder_layers": 2,
                "encoder_attention_heads": 2,
                "decoder_attention_heads": 2,
                "encoder_ffn_dim": 64,
                "decoder_ffn_dim": 64,
                "num_mel_bins": 80,
                "vocab_size": 512,
                "max_source_positions": 100,
                "max_target_positions": 64,
                "pad_token_id": 0,
                "bos_token_id": 1,
                "eos_token_id": 0,
                "decoder_start_token_id": 1,
                "begin_suppress_tokens": None,
                "suppress_tokens": None,
            },
            "chunk_s": 2,
            "audio_s": 1.5,
            "new_tokens": 6,
        },
    }

    def _load(self, device: str) -> None:
        from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

        from agentsched.tools._torch import build_random, quiet_transformers

        quiet_transformers()
        p = self.params
        cfg = WhisperConfig(**p["config"])
        self._m_model = build_random(WhisperForConditionalGeneration, cfg, self.sub_seed("weights")).to(device)
        fe = WhisperFeatureExtractor(
            feature_size=cfg.num_mel_bins, sampling_rate=SAMPLE_RATE, chunk_length=p["chunk_s"]
        )
        wave = inputs.audio(p["audio_s"], SAMPLE_RATE, self.sub_seed("inputs"))
        feats = fe(wave, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        self._m_features = feats.to(device)
        self._m_start = cfg.decoder_start_token_id

    def _call(self) -> Any:
        import torch
        from transformers import GenerationConfig, GenerationMixin

        n = self.params["new_tokens"]
        gen = GenerationConfig(
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            decoder_start_token_id=self._m_start,
            pad_token_id=0,
            eos_token_id=None,
            bos_token_id=None,
        )
        with torch.inference_mode():
            # the plain encoder-decoder generate: Whisper's own override adds language/timestamp logic
            out = GenerationMixin.generate(self._m_model, self._m_features, generation_config=gen)
        return out[:, -n:]


def mel_filterbank(n_mels: int, n_fft: int, sample_rate: int, fmin: float = 0.0, fmax: float | None = None) -> Any:
    """HTK-style triangular mel filters, (n_mels, n_fft // 2 + 1) float32 numpy."""
    import numpy as np

    fmax = fmax or sample_rate / 2

    def mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    edges = hz(np.linspace(mel(fmin), mel(fmax), n_mels + 2))
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    fb = np.zeros((n_mels, freqs.size), dtype=np.float32)
    for i in range(n_mels):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        up = (freqs - lo) / max(mid - lo, 1e-9)
        down = (hi - freqs) / max(hi - mid, 1e-9)
        fb[i] = np.maximum(0.0, np.minimum(up, down))
    return fb


def dct_matrix(n_out: int, n_in: int) -> Any:
    """Orthonormal DCT-II, (n_out, n_in) float32 numpy."""
    import numpy as np

    k = np.arange(n_out)[:, None]
    n = np.arange(n_in)[None, :]
    m = np.cos(math.pi / n_in * (n + 0.5) * k) * math.sqrt(2.0 / n_in)
    m[0] /= math.sqrt(2.0)
    return m.astype(np.float32)


class AudioFeatures(Tool):
    """STFT power spectrogram and MFCCs of a clip -> {"power": (freq, frames), "mfcc": (n_mfcc, frames)}."""

    name = "audio_features"
    size_param = "audio_s"
    size_unit = "audio_s"
    family = "audio"
    SIZES = {
        Size.PAPER: {"audio_s": 10.0, "n_fft": 400, "hop": 160, "n_mels": 80, "n_mfcc": 13},
        Size.SMALL: {"audio_s": 1.0, "n_fft": 400, "hop": 160, "n_mels": 40, "n_mfcc": 13},
    }

    def __init__(
        self,
        size: str | Size = Size.SMALL,
        *,
        seed: int = 0,
        tones_hz: tuple[float, ...] = (440.0, 1000.0),
        **options: Any,
    ) -> None:
        super().__init__(size, seed=seed, **options)
        self.tones_hz = tones_hz  # frequencies of the synthetic clip

    def _load(self, device: str) -> None:
        import torch

        p = self.params
        wave = inputs.audio(p["audio_s"], SAMPLE_RATE, self.sub_seed("inputs"), self.tones_hz)
        self._m_wave = torch.from_numpy(wave).to(device)
        self._m_window = torch.hann_window(p["n_fft"], device=device)
        self._m_fbank = torch.from_numpy(mel_filterbank(p["n_mels"], p["n_fft"], SAMPLE_RATE)).to(device)
        self._m_dct = torch.from_numpy(dct_matrix(p["n_mfcc"], p["n_mels"])).to(device)

    def _call(self) -> dict[str, Any]:
        import torch

        p = self.params
        with torch.inference_mode():
            spec = torch.stft(self._m_wave, p["n_fft"], hop_length=p["hop"], window=self._m_window, return_complex=True)
            power = spec.abs().pow(2)
            logmel = torch.log(self._m_fbank @ power + 1e-10)
            mfcc = self._m_dct @ logmel
        return {"power": power, "mfcc": mfcc}


TOOLS = [WhisperBase, AudioFeatures]
