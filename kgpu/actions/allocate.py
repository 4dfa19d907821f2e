"""The allocate action: place pending pods one by one, each seeing the ones before it.

A session step decides and records; it does not talk to anyone. What it returns (binds,
pods left pending with their reasons, the events to emit) is plain data that the Kubernetes
edge carries out and the simulator applies, so a session can be replayed, tested and
explained. Reservations are made in the session's ClusterState as it goes, and released
again by ``undo`` if the edge could not carry a bind out.

Order: higher priority first; among equals, the order given (arrival or creation time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.framework.status import Status
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.state.cluster import ClusterState


@dataclass(frozen=True, slots=True)
class Bind:
    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...]
    gpu_milli: int


@dataclass(frozen=True, slots=True)
class Pending:
    pod: PodKey
    status: Status
    message: str


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes event to emit on the pod: ``Scheduled`` or ``FailedScheduling``."""

    pod: PodKey
    type: str  # "Normal" or "Warning"
    reason: str
    message: str


@dataclass(slots=True)
class SessionResult:
    binds: list[Bind] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def allocate(state: ClusterState, scheduler: Scheduler, pods: Sequence[PodSpec]) -> SessionResult:
    result = SessionResult()
    ordered = sorted(range(len(pods)), key=lambda i: -pods[i].priority)
    for i in ordered:
        pod = pods[i]
        outcome = scheduler.schedule(state, pod)
        if isinstance(outcome, Placement):
            state.allocate(pod, outcome.node, outcome.gpus)
            node = state.nodes[outcome.node].name
            result.binds.append(Bind(pod.key, node, outcome.gpus, pod.gpu.milli))
            where = f"{node}" + (
                f" (GPUs {','.join(map(str, outcome.gpus))})" if outcome.gpus else ""
            )
            result.events.append(
                Event(pod.key, "Normal", "Scheduled", f"Successfully assigned {pod.key} to {where}")
            )
        else:
            result.pending.append(Pending(pod.key, outcome.status, outcome.message))
            result.events.append(Event(pod.key, "Warning", "FailedScheduling", outcome.message))
    return result


def undo(state: ClusterState, bind: Bind) -> None:
    """Release a reservation whose bind the edge could not carry out."""
    state.release(bind.pod)
