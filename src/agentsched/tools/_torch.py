"""torch helpers shared by the tool families (imported only by them, never by the core)."""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

import torch

from agentsched.errors import TestbedError


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise TestbedError(
            "this machine has no CUDA GPU: a GPU placement cannot run here (use --testbed sim, "
            "or map every task to cpu)"
        )


def _no_init_context() -> contextlib.AbstractContextManager:
    """Skip transformers' own weight init (we fill every parameter ourselves, faster and seeded)."""
    for mod, attr in (
        ("transformers.initialization", "no_init_weights"),
        ("transformers.modeling_utils", "no_init_weights"),
    ):
        try:
            m = __import__(mod, fromlist=[attr])
            return getattr(m, attr)()
        except (ImportError, AttributeError, TypeError):
            continue
    return contextlib.nullcontext()


@torch.no_grad()
def fill_random_(model: torch.nn.Module, seed: int, std: float = 0.02) -> torch.nn.Module:
    """Seeded random weights: N(0, std) matrices, unit norm scales, zero biases.

    Latency depends on the architecture, not the values; this only has to be finite and
    reproducible. Buffers (rotary tables, position ids, BN statistics) are left as built.
    """
    g = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if p.ndim == 0:  # e.g. CLIP's logit_scale
            p.fill_(math.log(1 / 0.07))
        elif p.ndim == 1:
            if leaf == "bias" or "bias" in leaf:
                p.zero_()
            else:  # LayerNorm/RMSNorm/BatchNorm scale
                p.fill_(1.0)
        elif p.device.type == "cpu":
            p.normal_(0.0, std, generator=g)
        else:
            p.copy_(torch.empty(p.shape, dtype=p.dtype).normal_(0.0, std, generator=g))
    return model


# Building a model touches process-wide torch state: transformers' skip-init patches torch.nn.init,
# and a dtype other than the default switches torch's default dtype while it builds. Tools load in
# many threads at once (the warm pool), so builds take turns, and none switches the default dtype
# (a tensor another thread creates meanwhile would silently be bfloat16).
_BUILD_LOCK = threading.Lock()


def build_random(model_cls: Any, config: Any, seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A transformers model from its config, on the host, in ``dtype``, with seeded random weights.

    Built in float32 through ``_from_config`` with the library's own init skipped, then tied and
    filled by ``fill_random_`` (faster, seeded); the parameters are then cast to ``dtype`` in place
    (buffers, e.g. rotary tables, stay float32 as the library intends: bf16 buffers make Llama
    decoding ~2x slower). One build at a time (``_BUILD_LOCK``).
    """
    with _BUILD_LOCK:
        with _no_init_context():
            try:
                model = model_cls._from_config(config, dtype=torch.float32)
            except TypeError:  # transformers 4.x spells it torch_dtype
                model = model_cls._from_config(config, torch_dtype=torch.float32)
        model.tie_weights()
        fill_random_(model, seed)
        if dtype != torch.float32:
            with torch.no_grad():
                for prm in model.parameters():  # (tied parameters are one object: cast once)
                    prm.data = prm.data.to(dtype)
    return model.eval()


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def to_device(obj: Any, device: str) -> Any:
    """Move a tensor, a module (in place), or a dict/list/tuple of them; leave anything else."""
    if isinstance(obj, (torch.Tensor, torch.nn.Module)):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def quiet_transformers() -> None:
    """Silence generation warnings that random-weight models trigger on every call."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # from_pretrained's "Loading weights" bar
    except ImportError:  # pragma: no cover
        pass
