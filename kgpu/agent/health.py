"""The agent's metrics and probes: is the loop still turning, and what did it last see.

An NVML call can hang on a GPU in a bad state, and then no round ends: ``/healthz`` turns
503 once no round has finished for ``stall_after`` seconds, so the kubelet restarts the
agent. ``/readyz`` is 200 once the Device has been written (or found current) once.

Metrics: ``kgpu_agent_gpus`` and ``kgpu_agent_rdma_devices`` by health,
``kgpu_agent_rounds_total`` by result (written, unchanged, failed),
``kgpu_agent_xid_events_total`` by XID code and whether it made the GPU unhealthy,
``kgpu_agent_last_round_timestamp_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kgpu.agent.inventory import Inventory


class AgentMetrics:
    def __init__(
        self,
        stall_after: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry()
        self.stall_after = stall_after
        self._clock = clock
        self._wall = wall
        self._last_round = clock()  # the start counts: the first round gets its full time
        self._published = False
        r = self.registry
        self.gpus = Gauge(
            "kgpu_agent_gpus", "GPUs the agent reports, by health", ["health"], registry=r
        )
        self.rdma = Gauge(
            "kgpu_agent_rdma_devices",
            "RDMA devices the agent reports, by health",
            ["health"],
            registry=r,
        )
        self.rounds = Counter(
            "kgpu_agent_rounds", "rounds of discovery, by result", ["result"], registry=r
        )
        self.xids = Counter(
            "kgpu_agent_xid_events",
            "critical XID events, by code and whether they made the GPU unhealthy",
            ["code", "fatal"],
            registry=r,
        )
        self.last_round = Gauge(
            "kgpu_agent_last_round_timestamp_seconds", "when the last round ended", registry=r
        )

    def round_done(self, result: str, inventory: Inventory | None) -> None:
        """``result``: written, unchanged or failed."""
        self._last_round = self._clock()
        self.last_round.set(self._wall())
        self.rounds.labels(result).inc()
        if result != "failed":
            self._published = True
        if inventory is not None:
            bad = len(inventory.unhealthy)
            self.gpus.labels("healthy").set(len(inventory.gpus) - bad)
            self.gpus.labels("unhealthy").set(bad)
            nics = inventory.rdma or ()
            self.rdma.labels("healthy").set(sum(n.active for n in nics))
            self.rdma.labels("unhealthy").set(sum(not n.active for n in nics))

    def xid(self, code: int, fatal: bool) -> None:
        self.xids.labels(str(code), str(fatal).lower()).inc()

    def live(self) -> list[str]:
        age = self._clock() - self._last_round
        if age <= self.stall_after:
            return []
        return [f"no round finished for {age:.0f}s (a GPU or the API server does not answer)"]

    def ready(self) -> list[str]:
        return [] if self._published else ["the Device has not been written yet"]

    def render(self) -> bytes:
        return generate_latest(self.registry)
