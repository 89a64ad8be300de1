"""The process's tool pool (testbeds/tool_pool.py): warm instances, one use at a time unless a tool
is concurrent-safe, LRU eviction under the one VRAM budget, waiting instead of over-committing,
broken and timed-out instances dropped. Duck-typed fake tools: no torch, no GPU needed."""

from __future__ import annotations

import threading
import time

import pytest

from agentsched.testbeds.real import Cancelled
from agentsched.testbeds.tool_pool import ToolPool, VramWontFit


class Fake:
    """A tool that logs its loads and unloads."""

    concurrent_safe = False

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log, self.device = name, log, None

    def load(self, device: str) -> None:
        self.log.append(("load", self.name, device))
        self.device = device

    def unload(self) -> None:
        self.log.append(("unload", self.name, self.device))
        self.device = None


class SafeFake(Fake):
    concurrent_safe = True


def key(name: str, device: str = "cuda") -> tuple:
    return (name, device, ())


def builder(log: list, cls=Fake):
    def build_for(name: str):
        return lambda: cls(name, log)

    return build_for


def take(pool: ToolPool, name: str, log: list, vram_mb: float = 0.0, device: str = "cuda", **kw):
    return pool.acquire(key(name, device), builder(log)(name), vram_mb=vram_mb, **kw)


def loads(log: list) -> list[str]:
    return [e[1] for e in log if e[0] == "load"]


def test_an_instance_is_loaded_once_and_reused_warm():
    pool, log = ToolPool(), []
    first = take(pool, "clip", log, 100)
    assert first.load_ms > 0 and not first.hit
    pool.release(first)
    for _ in range(5):
        lease = take(pool, "clip", log, 100)
        assert lease.hit and lease.tool is first.tool
        pool.release(lease)
    assert loads(log) == ["clip"] and pool.stats()["hits"] == 5 and pool.stats()["loads"] == 1
    assert pool.resident_vram_mb == 100  # idle, still resident


def test_a_tool_not_safe_for_concurrent_calls_gets_one_instance_per_concurrent_use():
    pool, log = ToolPool(), []
    a, b = take(pool, "ocr", log, device="cpu"), take(pool, "ocr", log, device="cpu")
    assert a.tool is not b.tool and loads(log) == ["ocr", "ocr"]
    pool.release(a)
    pool.release(b)
    c = take(pool, "ocr", log, device="cpu")
    assert c.hit and c.tool in (a.tool, b.tool) and pool.loaded_count() == 2


def test_a_concurrent_safe_tool_is_shared_by_concurrent_uses():
    pool, log = ToolPool(), []
    build = builder(log, SafeFake)("embed")
    a = pool.acquire(key("embed"), build, vram_mb=50)
    b = pool.acquire(key("embed"), build, vram_mb=50)
    assert b.hit and a.tool is b.tool and loads(log) == ["embed"] and pool.resident_vram_mb == 50


def test_idle_instances_are_evicted_least_recently_used_first():
    pool, log = ToolPool(budget_mb=1000), []
    for name in ("a", "b"):
        pool.release(take(pool, name, log, 400))
    pool.release(take(pool, "a", log, 400))  # a used again: b is now the least recently used
    pool.release(take(pool, "c", log, 400))  # 800 + 400 > 1000: evicts b, not a
    assert [e[1] for e in log if e[0] == "unload"] == ["b"]
    pool.release(take(pool, "d", log, 500))  # 800 + 500: evicts a, then fits beside c (400 + 500)
    assert [e[1] for e in log if e[0] == "unload"] == ["b", "a"]
    assert pool.stats()["evictions"] == 2 and pool.resident_vram_mb == 900
    assert pool.peak_resident_vram_mb <= 1000


def test_a_load_that_does_not_fit_waits_for_a_running_one_and_never_exceeds_the_budget():
    pool, log = ToolPool(budget_mb=1000), []
    busy = take(pool, "x", log, 600)
    assert take(pool, "y", log, 600, wait=False) is None  # x runs (not evictable): y would wait
    got = []
    t = threading.Thread(target=lambda: got.append(take(pool, "y", log, 600)))
    t.start()
    t.join(0.3)
    assert not got and loads(log) == ["x"]  # still waiting while x runs
    pool.release(busy)  # x idle now: evicted for y
    t.join(10)
    assert got and got[0].tool.name == "y" and loads(log) == ["x", "y"]
    assert log.index(("unload", "x", "cuda")) < log.index(("load", "y", "cuda"))
    assert pool.peak_resident_vram_mb == 600


def test_the_asking_workflows_budget_applies_when_the_pool_has_none():
    pool, log = ToolPool(), []
    pool.release(take(pool, "big", log, 800))
    pool.release(take(pool, "other", log, 300))  # no budget asked: both resident
    assert pool.resident_vram_mb == 1100
    pool.release(take(pool, "small", log, 300, budget_mb=1000))  # evicts big (LRU) to fit 1000
    assert [e[1] for e in log if e[0] == "unload"] == ["big"] and pool.resident_vram_mb == 600


def test_a_load_larger_than_the_whole_budget_is_out_of_memory():
    pool = ToolPool(budget_mb=500)
    with pytest.raises(VramWontFit, match="out of memory: huge needs 600 MB of VRAM, more than the whole budget"):
        take(pool, "huge", [], 600)
    assert pool.resident_vram_mb == 0


def test_a_waiting_load_stops_when_its_run_is_stopped():
    pool, log = ToolPool(budget_mb=1000), []
    take(pool, "x", log, 900)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        take(pool, "y", log, 900, stop=stop)
    assert pool.resident_vram_mb == 900


def test_a_tool_whose_load_fails_keeps_nothing_and_is_built_afresh():
    pool, built = ToolPool(budget_mb=1000), []

    class Broken(Fake):
        def load(self, device):
            if len(built) == 1:
                raise OSError("weights missing")
            super().load(device)

    def build():
        t = Broken("m", [])
        built.append(t)
        return t

    with pytest.raises(OSError, match="weights missing"):
        pool.acquire(key("m"), build, vram_mb=400)
    assert pool.resident_vram_mb == 0 and pool.loaded_count() == 0
    lease = pool.acquire(key("m"), build, vram_mb=400)
    assert len(built) == 2 and lease.tool is built[1] and pool.resident_vram_mb == 400


def test_a_discarded_instance_is_never_reused_and_unloaded_when_its_user_returns():
    pool, log = ToolPool(), []
    hung = take(pool, "t", log, 200)
    pool.discard(hung)  # its user ran over its timeout and may still run
    assert not any(e[0] == "unload" for e in log) and pool.resident_vram_mb == 200
    fresh = take(pool, "t", log, 200)
    assert fresh.tool is not hung.tool and loads(log) == ["t", "t"]
    pool.release(hung)  # the hung call returned: now it is unloaded, its VRAM given back
    assert log[-1] == ("unload", "t", "cuda") and pool.resident_vram_mb == 200


def test_the_last_testbed_to_close_unloads_the_idle_instances():
    pool, log = ToolPool(), []
    pool.attach()
    pool.attach()
    pool.release(take(pool, "a", log, device="cpu"))
    pool.detach()
    assert pool.loaded_count() == 1
    pool.detach()
    assert pool.loaded_count() == 0 and log[-1] == ("unload", "a", "cpu") and pool.stats()["unloads"] == 1


def test_idle_host_instances_are_evicted_lru_while_host_memory_is_short():
    pool, log = ToolPool(), []
    short = [False]
    pool.host_pressure = lambda: short[0]
    for name in ("llama_1b", "bert", "llama_3b"):
        pool.release(take(pool, name, log, device="cpu"))
    assert pool.loaded_count() == 3  # plenty of memory: all kept
    pool.release(take(pool, "llama_1b", log, device="cpu"))  # used again: bert is now the LRU
    held = take(pool, "llama_3b", log, device="cpu")  # in use: never evicted
    calls = iter([True, True, False])
    short[0] = True
    pool.host_pressure = lambda: next(calls)
    pool.release(take(pool, "clip", log, device="cpu"))  # memory short twice: evicts bert, then llama_1b
    assert [e[1] for e in log if e[0] == "unload"] == ["bert", "llama_1b"]
    assert pool.loaded_count() == 2 and held.tool.device == "cpu"


def test_a_task_waiting_for_a_cpu_slot_gets_one_when_freed_or_stops_with_its_run():
    pool = ToolPool()
    pool.set_cpu_slots(1)
    stop = threading.Event()
    got: list[str] = []

    def second() -> None:
        try:
            with pool.cpu_slot(stop):
                got.append("ran")
        except Cancelled:
            got.append("cancelled")

    with pool.cpu_slot():
        th = threading.Thread(target=second)
        th.start()
        th.join(0.2)
        assert th.is_alive() and got == []  # waits: the one slot is held
        stop.set()
        th.join(10)
    assert got == ["cancelled"] and pool.cpu_busy == 0
    with pool.cpu_slot(threading.Event()):  # free again
        assert pool.cpu_busy == 1


def _wait_until(cond) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_cpu_slots_go_in_the_order_asked():
    pool = ToolPool()
    pool.set_cpu_slots(1)
    order: list[str] = []

    def task(name: str, stop: threading.Event | None = None) -> None:
        try:
            with pool.cpu_slot(stop):
                order.append(name)
        except Cancelled:
            order.append(f"{name} cancelled")

    stop_b = threading.Event()
    with pool.cpu_slot():
        threads = []
        for name, stop in (("a", None), ("b", stop_b), ("c", None)):
            threads.append(threading.Thread(target=task, args=(name, stop)))
            threads[-1].start()
            _wait_until(lambda n=len(threads): pool.cpu_waiting == n)  # it is in line before the next asks
        time.sleep(0.15)  # they have all waited past a poll (a re-wait must not lose their place)
        stop_b.set()  # b's run stops while it waits: it leaves the line, a and c keep their order
        _wait_until(lambda: order == ["b cancelled"])
    task("late")  # asks the instant the slot frees: behind a and c, not before them
    for th in threads:
        th.join(10)
    assert order == ["b cancelled", "a", "c", "late"] and pool.cpu_busy == 0


class SlowLoad(Fake):
    """Counts the loads in progress at once (``live``, ``most``), each taking 0.2 s."""

    live = most = 0
    lock = threading.Lock()

    def load(self, device: str) -> None:
        cls = type(self)
        with cls.lock:
            cls.live += 1
            cls.most = max(cls.most, cls.live)
        time.sleep(0.2)
        with cls.lock:
            cls.live -= 1
        super().load(device)


def _load_at_once(pool: ToolPool, names: list[str], log: list) -> None:
    def one(name: str) -> None:
        pool.release(pool.acquire(key(name, "cpu"), lambda: SlowLoad(name, log)))

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


def test_first_loads_run_one_at_a_time_and_later_ones_at_once():
    """Two threads importing a library at once (two first loads of transformers models) failed in a
    fresh serving process with a _DeadlockError; a tool's first load in the process runs alone."""
    SlowLoad.live = SlowLoad.most = 0
    names = [f"first-load-{i}" for i in range(3)]  # (names new to this process)
    _load_at_once(ToolPool(), names, log := [])
    assert SlowLoad.most == 1 and sorted(loads(log)) == names
    SlowLoad.most = 0
    _load_at_once(ToolPool(), names, log)  # a new pool: every tool loads again, now at once
    assert SlowLoad.most > 1 and len(loads(log)) == 6


def test_a_first_load_that_hangs_holds_the_others_back_only_so_long(monkeypatch):
    from agentsched.testbeds import real

    monkeypatch.setattr(real, "FIRST_LOAD_WAIT_S", 0.2)
    release = threading.Event()

    class Hangs(Fake):
        def load(self, device: str) -> None:
            release.wait(30)  # a download that does not come

    pool, log = ToolPool(), []
    hung = threading.Thread(target=lambda: pool.acquire(key("hangs-first", "cpu"), lambda: Hangs("h", log)))
    hung.start()
    try:
        time.sleep(0.1)  # the hanging load holds the first-load turn now
        lease = pool.acquire(key("other-first", "cpu"), lambda: Fake("o", log))  # waits 0.2 s, then loads beside it
        assert loads(log) == ["o"] and hung.is_alive()
        pool.release(lease)
    finally:
        release.set()
        hung.join(10)
