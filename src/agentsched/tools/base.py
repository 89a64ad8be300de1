"""The Tool interface: one real computation of the paper's Table 1, with a load step separate from a call.

Life cycle: ``load(device)`` builds the model (random weights from an architecture config, or the
real MiniLM weights) and the seeded inputs, and moves both to the device; ``call()`` runs one
invocation on those inputs and returns its output; ``sync()`` waits for the device so a timer
around ``call(); sync()`` measures the call; ``unload()`` frees memory. Nothing here imports torch:
families import it inside their methods, so ``import agentsched.tools`` works without the extra.
"""

from __future__ import annotations

import enum
import zlib
from abc import abstractmethod
from typing import Any, ClassVar

from agentsched.errors import ToolError
from agentsched.model.sizes import byte_size
from agentsched.model.tool import Tool as PublicTool


class Size(str, enum.Enum):
    """Model/input scale of a tool."""

    PAPER = "paper"  # the paper's architectures and per-call workloads
    SMALL = "small"  # tiny configs of the same families (tests, CI)

    def __str__(self) -> str:
        return self.value


def parse_size(size: str | Size) -> Size:
    try:
        return Size(str(getattr(size, "value", size)).lower())
    except ValueError:
        raise ToolError(f"unknown size {size!r} (valid: paper, small)") from None


def normalize_device(device: str) -> str:
    """'cpu', or 'cuda'/'cuda:N' ('gpu' is an alias of 'cuda')."""
    d = str(device).strip().lower()
    if d == "gpu":
        return "cuda"
    if d == "cpu" or d == "cuda" or d.startswith("cuda:"):
        return d
    raise ToolError(f"unknown device {device!r} (valid: cpu, gpu, cuda, cuda:N)")


def stable_seed(seed: int, *parts: str) -> int:
    """A seed derived from ``seed`` and names, stable across processes (unlike ``hash``)."""
    return (seed * 1_000_003 + zlib.crc32("/".join(parts).encode())) % (2**31 - 1)


class Tool(PublicTool):
    """One tool of the library: the public ``agentsched.Tool`` API (``load``, ``run``, ``unload``)
    plus a size, a seed, generated inputs, ``call()`` (one call on them) and ``move()``.
    Subclasses set the class attributes and implement the hooks."""

    name: ClassVar[str] = ""  # registry name, e.g. "clip"
    family: ClassVar[str] = ""  # module family, e.g. "text", "vision"
    has_gpu: ClassVar[bool] = True  # False: a GPU placement runs the same host code
    #: invocation arguments this tool computes on instead of its generated inputs (see ``run``)
    input_keys: ClassVar[frozenset[str]] = frozenset()
    #: per-size workload parameters (batch, sequence length, config knobs); subclasses fill it
    SIZES: ClassVar[dict[Size, dict[str, Any]]] = {}

    #: the workload parameter that is one call's input size (``size_unit`` of it), e.g. "batch" or
    #: "audio_s"; None: the size is the inputs' byte length
    size_param: ClassVar[str | None] = None

    def __init__(self, size: str | Size = Size.SMALL, *, seed: int = 0, **options: Any) -> None:
        # ``size`` (paper/small) is the scale of the build; ``self.size(inputs)`` is an invocation's input size
        self.scale = parse_size(size)  # which scale to build
        self.seed = int(seed)  # base seed of weights and inputs
        self.params: dict[str, Any] = {**self.SIZES[self.scale], **options}  # workload knobs
        self.device: str | None = None  # where it is loaded; None while unloaded
        self._options = dict(options)  # what with_size() rebuilds from

    # ---- life cycle -------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self.device is not None

    def run_device(self, device: str) -> str:
        """Where a placement on ``device`` really runs (host for tools without a GPU version)."""
        d = normalize_device(device)
        return d if self.has_gpu or d == "cpu" else "cpu"

    def load(self, device: str = "cpu") -> None:
        """Build model and inputs on ``device`` (idempotent for the same device)."""
        target = self.run_device(device)
        if self.device == target:
            return
        if self.device is not None:
            self.unload()
        if target.startswith("cuda"):
            from agentsched.tools._torch import require_cuda

            require_cuda()
        self._load(target)
        self.device = target

    def call(self) -> Any:
        """One invocation on the loaded inputs; returns the tool's output."""
        if self.device is None:
            raise ToolError(f"tool {self.name} called before load()")
        return self._call()

    def run(self, inputs: dict[str, Any] | None = None) -> Any:
        """The public API's call: on the arguments named in ``input_keys`` when ``inputs`` gives
        any, else on the generated, seeded inputs (what ``call()`` runs). Predecessors' outputs
        (keyed by task id) are not among those names, so a built-in tool inside a workflow keeps
        its seeded behaviour."""
        given = {k: v for k, v in (inputs or {}).items() if k in self.input_keys}
        if not given:
            return self.call()
        if self.device is None:
            raise ToolError(f"tool {self.name} called before load()")
        return self._call_with(given)

    def _call_with(self, given: dict[str, Any]) -> Any:
        raise ToolError(f"tool {self.name} takes no invocation arguments")  # pragma: no cover

    def example_inputs(self) -> dict[str, Any]:
        """The profiler times ``run({})``: the generated inputs."""
        return {}

    # ---- input size -------------------------------------------------------------------------
    def size(self, inputs: dict[str, Any]) -> float:
        """One call's input size in ``size_unit``: of the invocation arguments this tool computes on
        (``_size_of``) when ``inputs`` gives any, else of the generated inputs (``params[size_param]``)."""
        given = {k: v for k, v in (inputs or {}).items() if k in self.input_keys}
        if given:
            return self._size_of(given)
        if self.size_param is not None:
            return float(self.params[self.size_param])
        return byte_size(inputs or {}).value

    def _size_of(self, given: dict[str, Any]) -> float:
        return byte_size(given).value

    def with_size(self, size: float) -> Tool:
        """A new, unloaded tool of the same scale and seed whose generated inputs have about ``size``
        units (the profiler's sweep over sizes, for tools that take no invocation arguments)."""
        if self.size_param is None:
            raise ToolError(f"tool {self.name} has no size parameter to sweep")
        current = self.params[self.size_param]
        value: Any = max(1, round(size)) if isinstance(current, int) else float(size)
        return type(self)(self.scale, seed=self.seed, **{**self._options, self.size_param: value})

    def sync(self) -> None:
        """Wait for queued device work (a no-op on the CPU)."""
        if self.device is not None and self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def move(self, device: str) -> None:
        """Move a loaded tool between host and GPU without rebuilding it (staged ``gpu_now``)."""
        if self.device is None:
            raise ToolError(f"tool {self.name} moved before load()")
        target = self.run_device(device)
        if target == self.device:
            return
        if target.startswith("cuda"):
            from agentsched.tools._torch import require_cuda

            require_cuda()
        was = self.device
        self._move(target)
        self.device = target
        if was.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def unload(self) -> None:
        """Drop model and inputs; return GPU memory to the allocator's pool and the driver."""
        was = self.device
        self._unload()
        self.device = None
        if was is not None and was.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    # ---- hooks ------------------------------------------------------------------------------
    @abstractmethod
    def _load(self, device: str) -> None: ...

    @abstractmethod
    def _call(self) -> Any: ...

    def _move(self, device: str) -> None:
        # default: move every tensor/module attribute set by _load (names starting with "_m_")
        from agentsched.tools._torch import to_device

        for k in [k for k in vars(self) if k.startswith("_m_")]:
            setattr(self, k, to_device(getattr(self, k), device))

    def _unload(self) -> None:
        # default: forget every attribute set by _load (names starting with "_m_")
        for k in [k for k in vars(self) if k.startswith("_m_")]:
            delattr(self, k)

    def sub_seed(self, *parts: str) -> int:
        return stable_seed(self.seed, self.name, *parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.scale.value}, device={self.device})"


class AmplifiedTool(Tool):
    """``name_xK``: K back-to-back calls of a base tool (one load, K calls)."""

    family = "amplified"

    def __init__(self, base: Tool, k: int) -> None:
        if k < 1:
            raise ToolError(f"amplification must be >= 1, got {k}")
        self.base = base  # the tool repeated
        self.k = k  # calls per invocation
        self.scale = base.scale
        self.seed = base.seed
        self.params = base.params
        self.device = base.device
        self._options = base._options

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.base.name}_x{self.k}"

    @property
    def has_gpu(self) -> bool:  # type: ignore[override]
        return self.base.has_gpu

    @property
    def size_unit(self) -> str:  # type: ignore[override]
        return self.base.size_unit

    def size(self, inputs: dict[str, Any]) -> float:
        return self.base.size(inputs)  # each of the K calls runs on the same inputs

    def sized_inputs(self, size: float) -> dict[str, Any] | None:
        return self.base.sized_inputs(size)

    def with_size(self, size: float) -> Tool:
        return AmplifiedTool(self.base.with_size(size), self.k)

    def load(self, device: str = "cpu") -> None:
        self.base.load(device)
        self.device = self.base.device

    def _load(self, device: str) -> None:  # pragma: no cover - load() delegates
        self.base.load(device)

    def _call(self) -> Any:
        out = None
        for _ in range(self.k):
            out = self.base.call()
        return out

    def run(self, inputs: dict[str, Any] | None = None) -> Any:
        out = None
        for _ in range(self.k):
            out = self.base.run(inputs)
        return out

    def sync(self) -> None:
        self.base.sync()

    def move(self, device: str) -> None:
        self.base.move(device)
        self.device = self.base.device

    def unload(self) -> None:
        self.base.unload()
        self.device = None
