"""The public tool API: ``agentsched.Tool``, the base class of every tool a workflow can run.

A tool is one computation with a model (or none) that can live on the host or on a GPU::

    class Transcribe(agentsched.Tool):
        name = "transcribe"
        workload = "speech to text, 30 s of 16 kHz audio per call"
        tags = ("compute-bound",)
        has_gpu = True

        def load(self, device):            # "cpu" or "cuda:N": build the model there
            ...
        def run(self, inputs):             # one call; inputs: see below
            return text
        def unload(self):                  # free the model (and its GPU memory)
            ...

``inputs`` maps each predecessor task id to that task's output; a source task (no predecessor)
receives the invocation's arguments (name -> value). A workflow names a tool by its import path
``"package.module:Class"`` (importable from the current directory or the environment); built-in
tools keep their names (``clip``, ``minilm_l6``...). Nothing here imports torch.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar

from agentsched.errors import ToolError, one_line
from agentsched.model.cards import ToolCard
from agentsched.model.sizes import BYTES, DEFAULT_SIZE_MARK, byte_size

# "package.module:Class" (dotted module, dotted attribute path inside it)
_PATH_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

# Placeholder latency of a tool no profiler measured: cards need a figure, but a cold-start policy
# never reads it (agent-rules in cold start sees names, tags and workload lines only).
UNMEASURED_MS = 1.0


class Tool(ABC):
    """Base class of a user tool. Subclasses set the class attributes and implement ``run``.

    ``load``/``unload`` default to no-ops (a tool without a model); ``sync`` and ``move`` are
    optional hooks with working defaults; ``example_inputs`` returns None by default, and
    ``agentsched profile`` needs it to time the tool.
    """

    name: ClassVar[str] = ""  # short name shown to schedulers (default: the class name)
    workload: ClassVar[str] = ""  # one line: what one call computes (read by cold-start schedulers)
    tags: ClassVar[tuple[str, ...]] = ()  # e.g. compute-bound, memory-bound, compute-light, io-bound
    has_gpu: ClassVar[bool] = True  # False: a GPU placement runs the same host code
    #: argument names a source task needs from the invocation (optional; checked before a run)
    input_names: ClassVar[tuple[str, ...]] = ()
    #: True: ``run`` may be called from several threads at once, so concurrent invocations share one
    #: loaded instance; False (default): one instance per concurrent use, each loaded once and kept
    concurrent_safe: ClassVar[bool] = False
    #: what ``size(inputs)`` counts: e.g. "audio_s", "pages", "tokens", "pixels" (default: "bytes")
    size_unit: ClassVar[str] = BYTES

    def load(self, device: str) -> None:  # noqa: B027 - an optional hook, empty by default
        """Build the model on ``device`` ("cpu" or "cuda:N"). Called before the first ``run``."""

    @abstractmethod
    def run(self, inputs: dict[str, Any]) -> Any:
        """One call. ``inputs``: predecessor task id -> its output, or the invocation's arguments
        for a source task. Returns this task's output (passed on to its successors)."""

    def unload(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Drop the model and free its memory (GPU memory included)."""

    def sync(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Wait for queued device work so a timer around ``run(); sync()`` measures the call."""

    def move(self, device: str) -> None:
        """Move a loaded tool to ``device`` (default: unload, then load there)."""
        self.unload()
        self.load(device)

    def example_inputs(self) -> dict[str, Any] | None:
        """Inputs the profiler times ``run`` on (None: this tool cannot be profiled alone)."""
        return None

    def size(self, inputs: dict[str, Any]) -> float:
        """The size of one call's ``inputs`` in ``size_unit``, computed before placement (cost curves are
        functions of it). Default: their byte length. Override with the figure the tool's cost follows
        (seconds of audio, pages, tokens...) and set ``size_unit``. It should be cheap and never raise:
        when it does, or returns no finite number >= 0, the byte length is used and the record says so."""
        return byte_size(inputs).value

    setattr(size, DEFAULT_SIZE_MARK, True)

    def sized_inputs(self, size: float) -> dict[str, Any] | None:
        """Inputs of about ``size`` (in ``size_unit``) for the profiler's sweep over sizes; None (default):
        the profiler scales ``example_inputs()`` (repeats its strings, bytes and lists)."""
        return None

    @classmethod
    def display_name(cls) -> str:
        return cls.name or cls.__name__


# ---- import paths -----------------------------------------------------------------------------
def is_tool_path(text: str) -> bool:
    """True for ``package.module:Class`` (a user tool), False for a built-in tool name."""
    return bool(_PATH_RE.match(text))


def _registry_key(obj: type[Tool] | Tool, label: str | None = None) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    key = f"{cls.__module__}:{cls.__qualname__}"
    if isinstance(obj, type):
        return key
    if label is None:
        return f"{key}.i{id(obj)}"
    key = f"{key}.{re.sub(r'[^A-Za-z0-9_]', '_', label)}"
    held = _IN_MEMORY.get(key.replace("<locals>.", ""))
    # another instance under the same label in this process (a workflow built twice): never swap the
    # first one's tool under it; this one's key then lives as long as the process
    return key if held is None or held is obj else f"{key}.i{id(obj)}"


# Tools given in memory (workflow_from_tools): classes that cannot be imported by path (defined in
# __main__ or a function) and instances. Keyed by a path-shaped name the workflow's task names.
_IN_MEMORY: dict[str, type[Tool] | Tool] = {}


def register_tool(obj: type[Tool] | Tool, label: str | None = None) -> str:
    """The path a workflow names ``obj`` by: its import path when that resolves to this class,
    else a path-shaped key of an in-memory registry (instances are always kept in memory). An
    instance's key is its class's path and ``label`` (``workflow_from_tools``: the workflow's name
    and the task's id), the same in every process, so its learner and cards resume after a restart;
    without a label, or when another instance holds that key here, the key names the object itself."""
    if isinstance(obj, type):
        if not issubclass(obj, Tool):
            raise ToolError(f"{obj.__module__}.{obj.__qualname__} is not an agentsched.Tool subclass")
        path = f"{obj.__module__}:{obj.__qualname__}"
        check_declared(obj, path)
        try:
            if "<locals>" not in path and _import_attr(path) is obj:
                return path
        except ToolError:
            pass
    elif not isinstance(obj, Tool):
        raise ToolError(f"{type(obj).__name__} object is not an agentsched.Tool (subclass it)")
    else:
        check_declared(type(obj), f"{type(obj).__module__}:{type(obj).__qualname__}")
    key = _registry_key(obj, label).replace("<locals>.", "")
    _IN_MEMORY[key] = obj
    return key


# Folders of the workflow files read (model/workflow_io.py): a tool module is found beside its workflow
# file first, then in the current directory, then in the environment (as a card file is found beside it).
_BESIDE_WORKFLOWS: list[str] = []


def tools_beside(folder: Path) -> None:
    """Tool modules are looked for in ``folder`` (a workflow file's) before the current directory."""
    f = str(Path(folder).resolve())
    if f not in _BESIDE_WORKFLOWS:
        _BESIDE_WORKFLOWS.append(f)


def _search_path() -> list[str]:
    """Put the workflow files' folders, then the current directory, before the environment on
    ``sys.path`` (kept there: worker processes inherit it); returns the folders looked in."""
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:  # "importable from the current directory"
        sys.path.insert(0, cwd)
    for f in reversed(_BESIDE_WORKFLOWS):
        if f not in sys.path:
            sys.path.insert(0, f)
    return [*_BESIDE_WORKFLOWS, cwd]


def _import_attr(path: str) -> Any:
    module, _, attr = path.partition(":")
    folders = _search_path()
    try:
        obj: Any = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            file = e.name.replace(".", "/") + ".py"
            raise ToolError(
                f"tool {path}: no module named {e.name!r}: looked in {', '.join(folders)} (beside the "
                f"workflow file, then the current directory) and the environment: put {file} beside "
                "the workflow file, or install its package (pip install -e), or add its folder to "
                "PYTHONPATH"
            ) from None
        raise ToolError(f"tool {path}: importing {module} failed: {one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - user code: any failure is one line
        raise ToolError(f"tool {path}: importing {module} failed: {one_line(e)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ToolError(f"tool {path}: module {module} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve_tool(path: str) -> type[Tool] | Tool:
    """The class (or in-memory instance) a ``package.module:Class`` path names; one-line ToolError
    when it does not import or is not a ``Tool``."""
    if not is_tool_path(path):
        raise ToolError(f"tool {path!r} is not an import path (package.module:Class)")
    if path in _IN_MEMORY:
        return _IN_MEMORY[path]
    obj = _import_attr(path)
    if not (inspect.isclass(obj) and issubclass(obj, Tool)):
        what = f"class {obj.__name__}" if inspect.isclass(obj) else type(obj).__name__
        raise ToolError(f"tool {path}: {what} is not an agentsched.Tool subclass")
    if inspect.isabstract(obj):
        raise ToolError(f"tool {path}: class {obj.__name__} does not implement run(inputs)")
    check_declared(obj, path)
    return obj


def check_declared(cls: type[Tool], path: str) -> None:
    """The class attributes schedulers read have their documented types; else a one-line ToolError.
    Why: a string where a tuple of strings goes (``tags = "compute-bound"``) was read letter by
    letter, and cold-start schedulers placed the tool on tags 'c', 'o', 'm', ..."""
    for attr in ("tags", "input_names"):
        value = getattr(cls, attr)
        if isinstance(value, str):
            raise ToolError(
                f"tool {path}: {attr} must be a tuple of strings, not the string {value!r} (write ({value!r},))"
            )
        if not isinstance(value, (tuple, list)) or not all(isinstance(x, str) for x in value):
            raise ToolError(f"tool {path}: {attr} must be a tuple of strings, got {value!r}")
    if not isinstance(cls.size_unit, str) or not cls.size_unit.strip() or len(cls.size_unit) > 40:
        raise ToolError(f"tool {path}: size_unit must be a short word (e.g. 'pages'), got {cls.size_unit!r}")
    if not isinstance(cls.workload, str):
        raise ToolError(f"tool {path}: workload must be a string (one line), got {type(cls.workload).__name__}")
    for attr in ("has_gpu", "concurrent_safe"):
        if not isinstance(getattr(cls, attr), bool):
            raise ToolError(f"tool {path}: {attr} must be True or False, got {getattr(cls, attr)!r}")


def tool_class(path: str) -> type[Tool]:
    obj = resolve_tool(path)
    return obj if isinstance(obj, type) else type(obj)


def new_tool(path: str) -> Tool:
    """A tool instance for ``path``: a new one for a class, the registered one for an instance."""
    obj = resolve_tool(path)
    if not isinstance(obj, type):
        return obj
    try:
        return obj()
    except Exception as e:  # noqa: BLE001 - user code
        raise ToolError(f"tool {path}: {obj.__name__}() failed: {one_line(e)}") from None


_IMPORTS_OFF: ContextVar[bool] = ContextVar("agentsched_tool_imports_off", default=False)


@contextmanager
def without_tool_imports() -> Iterator[None]:
    """Within it, a user tool's cold card is built from its path alone: its module is not imported
    (``show`` describes a workflow; importing would run the user's code, e.g. prints on stdout)."""
    token = _IMPORTS_OFF.set(True)
    try:
        yield
    finally:
        _IMPORTS_OFF.reset(token)


def cold_card(path: str, vram_budget_mb: float | None) -> ToolCard:
    """The card of a tool no profiler measured: its name, workload line and tags, placeholder
    latencies, and - for a GPU tool - a conservative VRAM figure: the whole budget (so the start
    rules admit it only while no other task holds VRAM: it can never overrun the budget), or 0
    without a budget. Only cold-start policies may schedule with such cards."""
    if _IMPORTS_OFF.get():
        return ToolCard(name=path, workload=f"user tool {path} (not profiled; not imported)", cpu_ms=UNMEASURED_MS)
    cls = tool_class(path)
    gpu = cls.has_gpu
    return ToolCard(
        name=path,
        workload=cls.workload or f"user tool {cls.display_name()} (not profiled)",
        cpu_ms=UNMEASURED_MS,
        gpu_ms=UNMEASURED_MS if gpu else None,
        load_ms=0.0 if gpu else None,
        vram_mb=(vram_budget_mb or 0.0) if gpu else None,
        tags=host_only_tags(cls.tags) if not gpu else tuple(cls.tags),
    )


HOST_ONLY_TAG = "no-gpu"  # the tag of a tool without a GPU implementation (cold-start policies read tags)


def host_only_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """``tags`` with ``no-gpu``: a tool declared ``has_gpu = False`` says so the way a card's tags do,
    so no cold-start policy places it on a GPU mode (that would run the same host code: a wasted probe)."""
    tags = tuple(tags)
    return tags if HOST_ONLY_TAG in tags else (*tags, HOST_ONLY_TAG)
