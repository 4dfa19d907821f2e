"""Prometheus metrics of the live scheduler (served by :mod:`kgpu.kube.live.health_server`).

``/metrics``: Prometheus text format. ``/healthz``: 200 while the process serves.
``/readyz``: 200 once every informer has synced and, with leader election, once the first
election round has answered (leader or not: a standby is ready, it just does not bind),
503 with the list of what is missing before that.

Queue metrics, set after every session (the leader's; a standby shows the last it had):
``kgpu_queue_allocated``, ``kgpu_queue_deserved`` and ``kgpu_queue_fair_share`` per queue
and resource (``cpu`` in cores, ``memory`` in bytes, ``gpu`` in GPUs), and
``kgpu_queue_card_deserved``, ``..._allocated``, ``..._request`` and ``..._capacity`` per queue
and card, in cards (Volcano's capacity-card figures), and the same under the seed's names
``volcano_queue_card_deserved``, ``..._allocated``, ``..._request`` and ``..._capacity``
(labels ``queue_name`` and ``card_name``). A queue or card that is gone loses its series.

``kgpu_device_allocation_corrections_total`` and ``kgpu_device_allocation_conflicts_total``
per node count the pods whose GPUs the kubelet chose otherwise than kgpu's annotation said
(:mod:`kgpu.kube.live.allocation_correction`), corrected or reported.

Each scheduler gets its own registry, so several can live in one process (the tests run
two to check leader election).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kgpu.framework.session_result import QueueFigures
from kgpu.model.resources import MEMORY, MILLI
from kgpu.model.units import MIB

# From 1 ms to about a minute: a session over a large cluster, a pod that waited for room.
_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


# A queue's card figures, under kgpu's names and Volcano's capacity-card plugin's.
_CARD_FIGURES: Final = {
    "deserved": "its quota",
    "allocated": "held by its pods",
    "request": "held plus asked for by its pending pods",
    "capacity": "its limit, else what the cluster offers",
}


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.attempts = Counter(
            "kgpu_schedule_attempts",
            "Scheduling attempts by result: scheduled (bound), unschedulable (no node fits), "
            "error (unreadable request, or a bind the API server refused)",
            ["result"],
            registry=r,
        )
        self.pod_latency = Histogram(
            "kgpu_pod_scheduling_duration_seconds",
            "From a pod first seen pending by this scheduler to its binding",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.attempt_latency = Histogram(
            "kgpu_binding_duration_seconds",
            "One pod's bind, by step: check (the read before the Binding, where the API "
            "server ignores a Binding's preconditions), bind (the Binding with annotations)",
            ["step"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.session_latency = Histogram(
            "kgpu_session_duration_seconds",
            "One scheduling session: snapshot, decisions, handing the binds over",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "kgpu_pending_pods",
            "Pods of this scheduler waiting, by the reason code of their last attempt",
            ["reason"],
            registry=r,
        )
        self.corrections = Counter(
            "kgpu_device_allocation_corrections",
            "Pods whose device-allocation annotation was corrected to the GPUs the kubelet "
            "gave them (the node's Device checkpoint), by node",
            ["node"],
            registry=r,
        )
        self.conflicts = Counter(
            "kgpu_device_allocation_conflicts",
            "Pods the kubelet gave GPUs that kgpu's books hold for others, or fewer or more "
            "than they ask: reported, and kgpu's books keep the annotation, by node",
            ["node"],
            registry=r,
        )
        self.leader = Gauge(
            "kgpu_leader", "1 while this instance holds the leader lease", registry=r
        )
        for result in ("scheduled", "unschedulable", "error"):
            self.attempts.labels(result)
        # The series every bind touches, looked up once: ``labels`` takes a lock and builds
        # a key on each call, three times a bound pod.
        self.scheduled = self.attempts.labels("scheduled")
        self.check_latency = self.attempt_latency.labels("check")
        self.bind_latency = self.attempt_latency.labels("bind")
        self.queue = _family(
            r,
            "kgpu_queue_",
            "The queue's {} (cpu in cores, memory in bytes, gpu in GPUs)",
            ["queue", "resource"],
            allocated="resources held by its pods",
            deserved="quota",
            fair_share="fair share as the last session computed it",
        )
        self.queue_card = _family(
            r,
            "kgpu_queue_card_",
            "Cards of the queue: {}",
            ["queue", "card"],
            **_CARD_FIGURES,
        )
        # The same figures under the names of Volcano's capacity-card plugin, so that its
        # dashboards and alerts keep working after the switch.
        self.volcano_queue_card = _family(
            r,
            "volcano_queue_card_",
            "Cards of the queue: {} (as Volcano's capacity-card plugin names it)",
            ["queue_name", "card_name"],
            **_CARD_FIGURES,
        )
        self._queue_series: set[tuple[Gauge, str, str]] = set()  # (gauge, queue, resource)

    def set_pending(self, by_reason: Mapping[str, int]) -> None:
        """Replace the pending gauge's series: reasons that no pod has any more go away."""
        self.pending.clear()
        for reason, count in by_reason.items():
            self.pending.labels(reason).set(count)

    def set_queues(self, figures: Sequence[QueueFigures]) -> None:
        """Set every queue's series; drop those of queues and cards that are gone."""
        series: set[tuple[Gauge, str, str]] = set()
        for f in figures:
            for what, vec in (("allocated", f.allocated), ("deserved", f.deserved),
                              ("fair_share", f.fair)):  # fmt: skip
                gauge = self.queue[what]
                for resource, amount in vec.items():
                    gauge.labels(f.name, resource).set(_base_units(resource, amount))
                    series.add((gauge, f.name, resource))
            for card, c in f.cards.items():
                for what, amount in (("deserved", c.deserved), ("allocated", c.allocated),
                                     ("request", c.request), ("capacity", c.capacity)):  # fmt: skip
                    for family in (self.queue_card, self.volcano_queue_card):
                        gauge = family[what]
                        gauge.labels(f.name, card).set(amount / MILLI)
                        series.add((gauge, f.name, card))
        for gauge, queue, name in self._queue_series - series:
            gauge.remove(queue, name)
        self._queue_series = series

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _family(
    registry: CollectorRegistry, prefix: str, help_: str, labels: list[str], **texts: str
) -> dict[str, Gauge]:
    """One gauge per figure (``prefix`` + its name), the help text filled in per figure."""
    return {
        what: Gauge(prefix + what, help_.format(text), labels, registry=registry)
        for what, text in texts.items()
    }


def _base_units(resource: str, amount: int) -> float:
    """Prometheus' base units: cores, bytes, GPUs (the core counts milli and MiB)."""
    if resource == MEMORY:
        return float(amount * MIB)
    return amount / MILLI  # milli-cores and milli-GPUs
