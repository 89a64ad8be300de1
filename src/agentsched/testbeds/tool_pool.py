"""The process-wide pool of loaded tools, and the one VRAM ledger of the process (local testbed).

A serving process runs many invocations of many workflows at once (one ``Runtime`` per workflow,
a round's invocations concurrently). They all draw their tools from one ``ToolPool``:

* **Warm.** An instance is keyed by (tool, device, variant) (``variant``: what else decides how it
  is built: size, seed, factory) and stays loaded after a run, for the next run of any workflow,
  ``Runtime`` or testbed in the process. ``load()`` is called once per instance, never per run.
* **Shared where safe.** A tool whose class sets ``concurrent_safe = True`` may run several calls
  at once: concurrent users share one instance. Otherwise (the default) an instance has one user at
  a time; a second concurrent use builds and loads a second instance (kept warm as well).
* **One VRAM budget.** Every instance resident on a GPU holds its card's VRAM in the ledger, idle
  or running. A GPU load is admitted only if it fits beside what is resident (``fits_vram``, the
  start rules' one check); else idle instances are evicted, least recently used first, and if that
  is not enough the load *waits* for running ones to finish: co-scheduled invocations never exceed
  the budget. A load that cannot fit even on an empty GPU fails as out of memory. The budget is the
  pool's own (``set_budget``: a service sets the smallest its workflows declare) or, when it has
  none, the budget of the workflow asking (so a small-budget workflow evicts others' idle models),
  else the one its caller gives (the local testbed: the GPU's memory).
* **Measured.** ``Lease.load_ms`` is what this use paid to load (0 on a warm hit); the counters
  (``stats()``) are what the service's /metrics exports.
* **Broken instances are dropped.** A load that raises leaves nothing in the pool (built afresh next
  time); an instance whose user ran over its timeout is *discarded*: never handed out again, and
  unloaded only once that user's call returns (it may still be running).

**CPU slots of the process** (``set_cpu_slots``; None, the default: no limit). A serving process
sets them (``serve --testbed local --cpu-slots N``): a ``cpu`` task of any run waits for one of the
N slots before it starts (``cpu_slot``), so concurrent invocations share the machine's CPU slots
as they share its VRAM, instead of each run's worker pool oversubscribing the cores together.

Host instances (device ``cpu``) are never evicted for VRAM. While host memory is short
(``host_pressure``: the shared pool's is less than 20% of the machine's memory available), idle
host instances are evicted LRU before a new host load, so e.g. llama_1b and llama_3b are not kept
together on a small machine. Idle instances are unloaded when the last testbed attached to the
pool closes (``detach``), or by ``evict_idle``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentsched.model.workflow import fits_vram
from agentsched.testbeds.real import Cancelled, first_load_alone, quiet_loading, unload_quietly

PoolKey = tuple[str, str, Hashable]  # (tool: built-in name or import path, device, variant)
STOP_POLL_S = 0.05  # a waiting task looks this often whether its run stopped


def on_gpu(device: str) -> bool:
    return device.startswith("cuda")


def concurrent_safe(tool: Any) -> bool:
    """May ``tool.run`` be called from several threads at once? (the class says; default no)"""
    return bool(getattr(tool, "concurrent_safe", False))


@dataclass(eq=False)
class _Instance:
    key: PoolKey
    tool: Any = None  # None while its first load runs
    vram_mb: float = 0.0  # held in the ledger while it exists on a GPU
    users: int = 0
    last_used: int = 0  # LRU tick
    ready: bool = False  # loaded (False while loading)
    discarded: bool = False  # never handed out again; unloaded when its last user releases it


@dataclass(eq=False)
class Lease:
    """One use of a pooled instance: ``tool`` to call, what this use paid to load (``load_ms``, 0 on
    a warm hit) and waited for VRAM (``wait_ms``). Give it back with ``ToolPool.release``."""

    instance: _Instance
    load_ms: float = 0.0
    wait_ms: float = 0.0
    evict_ms: float = 0.0  # unloading idle instances to make room for it (part of wait_ms)
    released: bool = field(default=False)

    @property
    def tool(self) -> Any:
        return self.instance.tool

    @property
    def hit(self) -> bool:
        return self.load_ms == 0.0


class VramWontFit(MemoryError):
    """A GPU load larger than the whole budget (an out of memory: ``failures.is_oom`` says so)."""


class ToolPool:
    """Loaded tool instances shared by every run of the process. See the module docstring."""

    def __init__(self, budget_mb: float | None = None) -> None:
        self.budget_mb = budget_mb  # the process's VRAM budget (None: each asker's own)
        self._cond = threading.Condition()
        self._instances: dict[PoolKey, list[_Instance]] = {}
        self._tick = itertools.count(1)
        self.resident_vram_mb = 0.0  # VRAM held by instances on a GPU (idle, running or loading)
        self.peak_resident_vram_mb = 0.0
        # counters (the service's /metrics reads them through ``stats``)
        self.loads = 0
        self.hits = 0
        self.unloads = 0
        self.evictions = 0
        self.load_ms_total = 0.0
        self.unload_ms_total = 0.0
        self._attached = 0  # testbeds using the pool (the last one to close unloads the idle)
        # True while host memory is short: idle host instances are then evicted (LRU) before a new
        # host load (None: host instances are never evicted; the shared pool watches RAM)
        self.host_pressure: Callable[[], bool] | None = None
        self.cpu_slots: int | None = None  # CPU tasks of every run at once (None: no limit)
        self.cpu_busy = 0
        self._cpu_cond = threading.Condition()
        self._cpu_line: collections.deque[object] = collections.deque()  # tasks waiting for a slot, in order

    # ---- configuration ---------------------------------------------------------------------
    def set_budget(self, budget_mb: float | None) -> None:
        """The one VRAM budget of the process (None: each workflow's own); wakes waiting loads."""
        with self._cond:
            self.budget_mb = budget_mb
            self._cond.notify_all()

    def set_cpu_slots(self, slots: int | None) -> None:
        """The process's CPU slots, shared by every run (None: no limit); wakes waiting tasks."""
        if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < 1):
            raise ValueError(f"cpu slots must be an integer >= 1 or None, got {slots!r}")
        with self._cpu_cond:
            self.cpu_slots = slots
            self._cpu_cond.notify_all()

    @contextlib.contextmanager
    def cpu_slot(self, stop: threading.Event | None = None) -> Iterator[None]:
        """Hold one of the process's CPU slots while the block runs (waiting for one first, and
        giving up with ``Cancelled`` when ``stop`` is set: its run failed meanwhile). Slots go in
        the order asked (FIFO): a task asking as a slot frees does not overtake those waiting."""
        with self._cpu_cond:
            ticket = object()
            self._cpu_line.append(ticket)
            try:
                while self._cpu_line[0] is not ticket or (
                    self.cpu_slots is not None and self.cpu_busy >= self.cpu_slots
                ):
                    if stop is not None and stop.is_set():
                        raise Cancelled("the run stopped while its task waited for a CPU slot")
                    self._cpu_cond.wait(STOP_POLL_S)
            except BaseException:
                self._cpu_line.remove(ticket)
                self._cpu_cond.notify_all()  # the one behind it may be first now
                raise
            self._cpu_line.popleft()
            self.cpu_busy += 1
            self._cpu_cond.notify_all()  # the next in line may take another free slot
        try:
            yield
        finally:
            with self._cpu_cond:
                self.cpu_busy -= 1
                self._cpu_cond.notify_all()

    @property
    def cpu_waiting(self) -> int:
        """Tasks waiting for a CPU slot now."""
        with self._cpu_cond:
            return len(self._cpu_line)

    def attach(self) -> None:
        with self._cond:
            self._attached += 1

    def detach(self) -> None:
        """A testbed closed; when it was the last one, unload every idle instance."""
        with self._cond:
            self._attached = max(0, self._attached - 1)
            last = self._attached == 0
        if last:
            self.evict_idle()

    # ---- leases ----------------------------------------------------------------------------
    def acquire(
        self,
        key: PoolKey,
        build: Callable[[], Any],
        *,
        vram_mb: float = 0.0,
        budget_mb: float | None = None,
        wait: bool = True,
        evict: bool = True,
        shareable: bool = False,
        stop: threading.Event | None = None,
    ) -> Lease | None:
        """A loaded instance of ``key`` for one use: an idle one (warm hit), a busy concurrent-safe
        one, or a new one built by ``build()`` and loaded on ``key``'s device (timed). A GPU load is
        admitted under the budget (``budget_mb``: the asker's, when the pool has none), evicting
        idle instances LRU first (``evict=False``: never), else waiting (``wait=False``: None instead;
        ``stop`` set: ``Cancelled``). ``shareable``: a busy instance may be shared even if its class
        does not say ``concurrent_safe`` (a tool given as one object has no second instance).
        Raises what the load raised (nothing is kept), or ``VramWontFit``."""
        started = time.perf_counter()
        with self._cond:
            inst = self._reuse(key, shareable)
            if inst is not None:
                self.hits += 1
                return Lease(inst)
            need = vram_mb if on_gpu(key[1]) else 0.0
            evicted: list[float] = []  # unload ms of each idle instance evicted for it
            inst = self._admit(key, need, budget_mb, wait, evict, stop, evicted)
            if inst is None:
                return None
        waited_ms = (time.perf_counter() - started) * 1000
        load_ms = self._load(inst, build)
        return Lease(inst, load_ms=load_ms, wait_ms=waited_ms, evict_ms=sum(evicted))

    def release(self, lease: Lease) -> None:
        """Give a use back: the instance stays loaded (idle, LRU-stamped), unless discarded."""
        if lease.released:
            return
        lease.released = True
        inst = lease.instance
        with self._cond:
            inst.users -= 1
            inst.last_used = next(self._tick)
            drop = inst.discarded and inst.users == 0
            self._cond.notify_all()
        if drop:
            self._unload(inst, forget=False)

    def discard(self, lease: Lease) -> None:
        """The use ran over its timeout: never hand this instance out again; it is unloaded when its
        user's call returns and releases it (never while it may still run)."""
        inst = lease.instance
        with self._cond:
            inst.discarded = True
            self._forget(inst)
            idle = inst.users == 0 and inst.ready  # (its user released it in the same instant)
            self._cond.notify_all()
        if idle:
            self._unload(inst, forget=False)

    # ---- views -----------------------------------------------------------------------------
    def loaded_count(self) -> int:
        """Instances loaded now (idle or in use), host and GPU."""
        with self._cond:
            return sum(1 for lst in self._instances.values() for i in lst if i.ready)

    def stats(self) -> dict[str, float]:
        with self._cond:
            return {
                "loaded": sum(1 for lst in self._instances.values() for i in lst if i.ready),
                "in_use": sum(1 for lst in self._instances.values() for i in lst if i.users),
                "loads": self.loads,
                "hits": self.hits,
                "unloads": self.unloads,
                "evictions": self.evictions,
                "load_ms_total": self.load_ms_total,
                "unload_ms_total": self.unload_ms_total,
                "resident_vram_mb": self.resident_vram_mb,
                "peak_resident_vram_mb": self.peak_resident_vram_mb,
                "budget_mb": self.budget_mb if self.budget_mb is not None else float("nan"),
            }

    def evict_idle(self) -> int:
        """Unload every idle instance; how many were unloaded."""
        with self._cond:
            idle = [i for lst in self._instances.values() for i in lst if i.ready and i.users == 0]
            for inst in idle:
                self._forget(inst)
        for inst in idle:
            self._unload(inst, forget=False)
        return len(idle)

    def fit_within(self, budget_mb: float | None) -> list[float]:
        """Evict idle GPU instances, least recently used first, until what is resident fits
        ``budget_mb`` (a run under a budget after runs without one); the unload ms of each."""
        evicted: list[float] = []
        if budget_mb is None:
            return evicted
        with self._cond:
            while not fits_vram(self.resident_vram_mb, 0.0, budget_mb):
                victim = self._lru_idle(on_gpu=True)
                if victim is None:
                    break
                self._evict(victim, evicted)
        return evicted

    # ---- inside the lock -------------------------------------------------------------------
    def _reuse(self, key: PoolKey, shareable: bool) -> _Instance | None:
        """An idle ready instance (most recently used first), else a busy concurrent-safe one."""
        lst = self._instances.get(key, [])
        idle = [i for i in lst if i.ready and i.users == 0]
        if idle:
            inst = max(idle, key=lambda i: i.last_used)
        else:
            inst = next((i for i in lst if i.ready and (shareable or concurrent_safe(i.tool))), None)
            if inst is None:
                return None
        inst.users += 1
        inst.last_used = next(self._tick)
        return inst

    def _admit(
        self,
        key: PoolKey,
        need_mb: float,
        budget_mb: float | None,
        wait: bool,
        evict: bool,
        stop: threading.Event | None,
        evicted: list[float],
    ) -> _Instance | None:
        """Reserve ``need_mb`` for a new instance (evicting idle LRU, else waiting); the placeholder."""
        if need_mb <= 0:  # a host instance: evicted for host memory only (``host_pressure``)
            while evict and self.host_pressure is not None and self.host_pressure():
                victim = self._lru_idle(on_gpu=False)
                if victim is None:
                    break
                self._evict(victim, evicted)
            return self._place(key, 0.0)
        while True:
            budget = self.budget_mb if self.budget_mb is not None else budget_mb
            if not fits_vram(0.0, need_mb, budget):
                raise VramWontFit(
                    f"out of memory: {key[0]} needs {need_mb:g} MB of VRAM, more than the whole budget of {budget:g} MB"
                )
            if fits_vram(self.resident_vram_mb, need_mb, budget):
                return self._place(key, need_mb)
            victim = self._lru_idle(on_gpu=True) if evict else None
            if victim is not None:
                self._evict(victim, evicted)
                continue
            if not wait:
                return None
            if stop is not None and stop.is_set():
                raise Cancelled
            self._cond.wait(timeout=STOP_POLL_S if stop is not None else None)

    def _place(self, key: PoolKey, need_mb: float) -> _Instance:
        inst = _Instance(key, vram_mb=need_mb, users=1, last_used=next(self._tick))
        self._instances.setdefault(key, []).append(inst)
        self._hold(need_mb)
        return inst

    def _evict(self, victim: _Instance, evicted: list[float]) -> None:
        """Unload an idle instance, outside the lock (its VRAM is given back once it is unloaded)."""
        self._forget(victim)
        self.evictions += 1
        self._cond.release()
        try:
            evicted.append(self._unload(victim, forget=False))
        finally:
            self._cond.acquire()

    def _lru_idle(self, *, on_gpu: bool) -> _Instance | None:
        idle = [
            i for lst in self._instances.values() for i in lst if i.ready and i.users == 0 and (i.vram_mb > 0) == on_gpu
        ]
        return min(idle, key=lambda i: i.last_used) if idle else None

    def _hold(self, mb: float) -> None:
        self.resident_vram_mb += mb
        self.peak_resident_vram_mb = max(self.peak_resident_vram_mb, self.resident_vram_mb)

    def _forget(self, inst: _Instance) -> None:
        lst = self._instances.get(inst.key, [])
        if inst in lst:
            lst.remove(inst)
            if not lst:
                del self._instances[inst.key]

    # ---- outside the lock ------------------------------------------------------------------
    def _load(self, inst: _Instance, build: Callable[[], Any]) -> float:
        """Build and load ``inst`` (timed); on failure nothing stays and its VRAM is given back."""
        try:  # (a first load waiting for another's is not timed: the wait is not this tool's load)
            with first_load_alone(inst.key[0]), quiet_loading():
                start = time.perf_counter()
                tool = build()
                tool.load(inst.key[1])
                load_ms = (time.perf_counter() - start) * 1000
        except BaseException:
            with self._cond:
                self._forget(inst)
                self.resident_vram_mb -= inst.vram_mb
                self._cond.notify_all()
            raise  # (a tool whose load failed is never unloaded: the next use builds afresh)
        with self._cond:
            inst.tool, inst.ready = tool, True
            self.loads += 1
            self.load_ms_total += load_ms
        return load_ms

    def _unload(self, inst: _Instance, *, forget: bool = True) -> float:
        """Unload ``inst`` (timed) and give its VRAM back; the unload's ms."""
        start = time.perf_counter()
        if inst.tool is not None:
            unload_quietly(inst.tool, f"tool {inst.key[0]} ({inst.key[1]})")
        unload_ms = (time.perf_counter() - start) * 1000
        with self._cond:
            if forget:
                self._forget(inst)
            inst.ready = False
            self.resident_vram_mb -= inst.vram_mb
            self.unloads += 1
            self.unload_ms_total += unload_ms
            self._cond.notify_all()
        return unload_ms


HOST_FREE_SHARE = 0.2  # below this share of the machine's memory free, idle host instances go first


def low_host_memory() -> bool:
    """Less than ``HOST_FREE_SHARE`` of this machine's memory is available (psutil; False without it)."""
    try:
        import psutil
    except ImportError:
        return False
    vm = psutil.virtual_memory()
    return vm.available < HOST_FREE_SHARE * vm.total


_SHARED = ToolPool()
_SHARED.host_pressure = low_host_memory


def shared_pool() -> ToolPool:
    """The process's pool: every local testbed built without its own pool uses it."""
    return _SHARED
