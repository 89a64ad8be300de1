"""Prometheus metrics of the service (``prometheus_client``, one registry per app, text format)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from agentsched.service.engine import Engine

# seconds: from a few ms (trivial tools) to minutes (large models on the CPU)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self, service: Engine) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.invocations = Counter(
            "agentsched_invocations", "Invocations answered, by workflow and status", ["workflow", "status"], registry=r
        )
        self.latency = Histogram(
            "agentsched_invocation_seconds",
            "Wall time of an invocation request, admission to answer",
            ["workflow"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        Gauge("agentsched_queue_depth", "Invocations accepted and not yet answered", registry=r).set_function(
            lambda: service.in_flight
        )
        Gauge(
            "agentsched_tools_loaded", "Tools kept loaded between invocations (local testbed)", registry=r
        ).set_function(service.tools_loaded)
        # the shared simulated machine of the real-time simulator, or the process under local live placement
        machine = service.machines.gauged
        if machine is not None:
            Gauge("agentsched_vram_reserved_mb", "VRAM held by runs in progress (MB)", registry=r).set_function(
                lambda: machine.reserved_mb
            )
            Gauge(
                "agentsched_vram_peak_mb", "The most VRAM runs in progress ever held at once (MB)", registry=r
            ).set_function(lambda: machine.peak_reserved_mb)
            Gauge("agentsched_vram_budget_mb", "The shared VRAM budget (MB)", registry=r).set_function(
                lambda: machine.budget_mb
            )
        memory = service.machines.contention
        if memory is not None:  # live placement: the contention its planner learned, restored runs included
            Gauge(
                "agentsched_contention_runs_learned",
                "GPU runs the live planner's contention was learned from (before a restart too)",
                registry=r,
            ).set_function(memory.runs_learned)

        pool = service.pool
        if pool is not None:  # the local testbed's warm tools (testbeds/tool_pool.py)
            stat = pool.stats
            Gauge(
                "agentsched_tool_loads", "Tool loads since start (a warm hit loads nothing)", registry=r
            ).set_function(lambda: stat()["loads"])
            Gauge("agentsched_tool_hits", "Tool uses served by an instance already loaded", registry=r).set_function(
                lambda: stat()["hits"]
            )
            Gauge("agentsched_tool_evictions", "Idle tools unloaded to make room in VRAM", registry=r).set_function(
                lambda: stat()["evictions"]
            )
            Gauge("agentsched_tool_load_seconds", "Time spent loading tools since start (s)", registry=r).set_function(
                lambda: stat()["load_ms_total"] / 1000
            )
            Gauge(
                "agentsched_tool_unload_seconds", "Time spent unloading tools since start (s)", registry=r
            ).set_function(lambda: stat()["unload_ms_total"] / 1000)
            Gauge(
                "agentsched_vram_resident_mb", "VRAM held by loaded tools on the GPU, idle or running (MB)", registry=r
            ).set_function(lambda: stat()["resident_vram_mb"])

    def observe(self, workflow: str, status: str, seconds: float) -> None:
        self.invocations.labels(workflow, status).inc()
        self.latency.labels(workflow).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
