"""The 19-tool library of the paper's Table 1, as real computations (needs the ``[tools]`` extra).

The registry below imports nothing heavy: listing tools works without torch; building one
(``get_tool``) imports its family module, which imports torch/transformers inside its methods.
``name_xK`` is the base tool called K times back to back (one load).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from typing import Any

from agentsched.tools.base import AmplifiedTool, Size, Tool, ToolError, parse_size

# device files of a GPU driver torch's CUDA (or ROCm) build can use on Linux: NVIDIA, WSL2, AMD
_GPU_DEVICE_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def cuda_available() -> bool:
    """Does this process see a CUDA GPU? False without torch (nothing imported until asked), and
    False without importing torch (2 s) on a Linux machine with no GPU driver at all."""
    if (
        sys.platform.startswith("linux")
        and "torch" not in sys.modules
        and not any(os.path.exists(f) for f in _GPU_DEVICE_FILES)
    ):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# name -> "module:Class", in Table 1 order
_REGISTRY: dict[str, str] = {
    "sentiment": "text:Sentiment",
    "bert_base": "text:BertBase",
    "distilbert": "text:DistilBert",
    "reranker": "text:Reranker",
    "minilm_l6": "text:MiniLM",
    "llama_3b": "llm:Llama3B",
    "resnet50": "vision:ResNet50",
    "clip": "vision:Clip",
    "whisper_base": "audio:WhisperBase",
    "llama_1b": "llm:Llama1B",
    "ocr": "vision:Ocr",
    "groupby": "tensor_ops:GroupBy",
    "image_resize": "tensor_ops:ImageResize",
    "audio_features": "audio:AudioFeatures",
    "vector_search": "tensor_ops:VectorSearch",
    "doc_merger": "tensor_ops:DocMerger",
    "web_search": "host:WebSearch",
    "log_analyzer": "host:LogAnalyzer",
    "pdf_parser": "host:PdfParser",
}
# tools without a GPU implementation (known without importing their module)
HOST_ONLY = frozenset({"web_search", "log_analyzer", "pdf_parser"})
_AMPLIFIED = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")


def tool_names() -> list[str]:
    """The 19 base tools, in the paper's Table 1 order."""
    return list(_REGISTRY)


def parse_tool_name(name: str) -> tuple[str, int]:
    """``clip_x12`` -> ("clip", 12); ``clip`` -> ("clip", 1). Raises ToolError for unknown tools."""
    if name in _REGISTRY:
        return name, 1
    m = _AMPLIFIED.match(name)
    if m is None or m.group("base") not in _REGISTRY:
        raise ToolError(f"unknown tool {name!r} (known: {', '.join(_REGISTRY)})")
    return m.group("base"), int(m.group("k"))


def tool_family(name: str) -> str:
    """The family (module) of a base tool, e.g. ``clip`` -> ``vision``; imports nothing heavy."""
    base, _ = parse_tool_name(name)
    return _REGISTRY[base].split(":")[0]


def tools_installed() -> bool:
    """True when torch and transformers (the ``[tools]`` extra) can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def tool_class(name: str) -> type[Tool]:
    base, _ = parse_tool_name(name)
    module, cls = _REGISTRY[base].split(":")
    try:
        mod = importlib.import_module(f"agentsched.tools.{module}")
    except ImportError as e:
        raise ToolError(f"tool {base} needs the tools extra (pip install 'agentsched[tools]'): {e}") from None
    return getattr(mod, cls)


def get_tool(name: str, size: str | Size = Size.SMALL, *, seed: int = 0, repeat: int = 1, **options: Any) -> Tool:
    """A new, unloaded tool; ``name_xK`` and ``repeat`` multiply into K back-to-back calls."""
    base, k = parse_tool_name(name)
    if repeat < 1:
        raise ToolError(f"repeat must be >= 1, got {repeat}")
    tool = tool_class(base)(parse_size(size), seed=seed, **options)
    return tool if k * repeat == 1 else AmplifiedTool(tool, k * repeat)


__all__ = [
    "HOST_ONLY",
    "AmplifiedTool",
    "Size",
    "Tool",
    "ToolError",
    "get_tool",
    "parse_tool_name",
    "tool_family",
    "tool_class",
    "tool_names",
    "tools_installed",
]
