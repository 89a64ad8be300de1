"""Tensor tools (no model): groupby, image_resize, vector_search, doc_merger.

Their "load" puts the data on the device (vector_search's index is its model: the paper's 3.1 GB
and 14.7 s load). ``doc_merger`` is transfer-bound on purpose, as in the paper (GPU slower than
CPU): its embeddings live in host memory and every GPU call copies them over and the result back.
Each tool keeps the host copy of its inputs in ``host_inputs`` so tests can recompute the answer.
"""

from __future__ import annotations

from typing import Any

from agentsched.tools import inputs
from agentsched.tools.base import Size, Tool


class GroupBy(Tool):
    """Scatter-add aggregation of ``rows`` values into ``groups`` keys -> {"sums", "counts", "means"}."""

    name = "groupby"
    size_param = "rows"
    size_unit = "rows"
    family = "tensor"
    SIZES = {
        Size.PAPER: {"rows": 4_000_000, "groups": 1000},
        Size.SMALL: {"rows": 10_000, "groups": 16},
    }

    def _load(self, device: str) -> None:
        import torch

        from agentsched.tools._torch import generator

        p = self.params
        g = generator(self.sub_seed("inputs"))
        keys = torch.randint(0, p["groups"], (p["rows"],), generator=g)
        values = torch.rand(p["rows"], generator=g) * 100.0
        self.host_inputs = {"keys": keys, "values": values}
        self._m_keys, self._m_values = keys.to(device), values.to(device)
        self._m_ones = torch.ones_like(self._m_values)

    def _call(self) -> dict[str, Any]:
        import torch

        n = self.params["groups"]
        sums = torch.zeros(n, device=self._m_values.device).scatter_add_(0, self._m_keys, self._m_values)
        counts = torch.zeros(n, device=self._m_values.device).scatter_add_(0, self._m_keys, self._m_ones)
        return {"sums": sums, "counts": counts, "means": sums / counts.clamp(min=1)}


class ImageResize(Tool):
    """Bilinear resize of a batch (n, 3, H, W) to (n, 3, out_h, out_w)."""

    name = "image_resize"
    size_param = "batch"
    size_unit = "images"
    family = "tensor"
    SIZES = {
        Size.PAPER: {"batch": 16, "height": 1024, "width": 1024, "out_height": 512, "out_width": 512},
        Size.SMALL: {"batch": 2, "height": 64, "width": 48, "out_height": 32, "out_width": 24},
    }

    def __init__(self, size: str | Size = Size.SMALL, *, seed: int = 0, images: Any = None, **options: Any) -> None:
        super().__init__(size, seed=seed, **options)
        self.images = images  # optional float tensor (n, 3, H, W) to resize instead of generated ones

    def _load(self, device: str) -> None:
        import torch

        p = self.params
        if self.images is not None:
            batch = self.images.float()
        else:
            imgs = inputs.images(p["batch"], p["height"], p["width"], self.sub_seed("inputs"))
            batch = torch.from_numpy(imgs).permute(0, 3, 1, 2).float().contiguous()
        self.host_inputs = {"images": batch}
        self._m_images = batch.to(device)

    def _call(self) -> Any:
        import torch

        p = self.params
        return torch.nn.functional.interpolate(
            self._m_images, size=(p["out_height"], p["out_width"]), mode="bilinear", align_corners=False
        )


class VectorSearch(Tool):
    """Top-k cosine search of ``queries`` over an index of ``index_rows`` unit vectors.

    Each query is a noisy copy of a planted index row (``planted``), so its top-1 is known.
    Returns {"scores": (q, k), "ids": (q, k)}.
    """

    name = "vector_search"
    size_param = "queries"
    size_unit = "queries"
    family = "tensor"
    SIZES = {
        Size.PAPER: {"index_rows": 2_000_000, "dim": 384, "queries": 16, "k": 10, "noise": 0.05},  # 3.1 GB fp32
        Size.SMALL: {"index_rows": 5000, "dim": 32, "queries": 4, "k": 5, "noise": 0.05},
    }

    def _load(self, device: str) -> None:
        import torch

        from agentsched.tools._torch import generator

        p = self.params
        g = generator(self.sub_seed("index"))
        index = torch.empty(p["index_rows"], p["dim"])
        step = 262_144  # normalise in chunks: no second full-size temporary
        for i in range(0, p["index_rows"], step):
            chunk = index[i : i + step]
            chunk.normal_(generator=g)
            chunk.div_(chunk.norm(dim=1, keepdim=True).clamp(min=1e-12))
        planted = torch.randint(0, p["index_rows"], (p["queries"],), generator=g)
        q = index[planted] + p["noise"] * torch.randn(p["queries"], p["dim"], generator=g) / p["dim"] ** 0.5
        q = torch.nn.functional.normalize(q, dim=1)
        self.planted = planted  # index row each query was copied from
        self.host_inputs = {"queries": q}
        self._m_index = index.to(device)
        del index
        self._m_queries = q.to(device)

    def _call(self) -> dict[str, Any]:
        import torch

        with torch.inference_mode():
            scores = self._m_queries @ self._m_index.T
            top = scores.topk(self.params["k"], dim=1)
        return {"scores": top.values, "ids": top.indices}


class DocMerger(Tool):
    """Reduce per-chunk embeddings (docs, chunks, dim) to one unit vector per document.

    On a GPU the embeddings stay in (pinned) host memory: each call copies them to the device,
    reduces, and copies the (docs, dim) result back, which is why the paper finds it slower there.
    """

    name = "doc_merger"
    size_param = "docs"
    size_unit = "docs"
    family = "tensor"
    SIZES = {
        Size.PAPER: {"docs": 128, "chunks": 3072, "dim": 384},  # 604 MB of fp32 embeddings
        Size.SMALL: {"docs": 4, "chunks": 8, "dim": 16},
    }

    def _load(self, device: str) -> None:
        import torch

        from agentsched.tools._torch import generator

        p = self.params
        emb = torch.randn(p["docs"], p["chunks"], p["dim"], generator=generator(self.sub_seed("inputs")))
        if device.startswith("cuda"):
            emb = emb.pin_memory()  # fast, asynchronous host-to-device copies
            self._m_scratch = torch.empty_like(emb, device=device)  # resident device buffer
        self.host_inputs = {"embeddings": emb}
        self._m_emb = emb

    def _move(self, device: str) -> None:
        import torch

        # the embeddings stay on the host either way; only the device buffer comes and goes
        if device.startswith("cuda"):
            self._m_scratch = torch.empty_like(self._m_emb, device=device)
        else:
            self.__dict__.pop("_m_scratch", None)

    def _call(self) -> Any:
        import torch

        with torch.inference_mode():
            if self.device and self.device.startswith("cuda"):
                x = self._m_scratch.copy_(self._m_emb, non_blocking=True)
                merged = torch.nn.functional.normalize(x.mean(dim=1), dim=-1)
                return merged.to("cpu")
            return torch.nn.functional.normalize(self._m_emb.mean(dim=1), dim=-1)


TOOLS = [GroupBy, ImageResize, VectorSearch, DocMerger]
