"""Decisions as data: what a scheduling session tells the edge (or the simulator) to do.

A session changes nothing outside itself; it returns these records, and the Kubernetes
edge binds, evicts, nominates and emits events accordingly (the simulator applies them to
its own state). Pending pods and their reasons are reported beside them by the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey


@dataclass(frozen=True, slots=True)
class Bind:
    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...]
    gpu_milli: int


class EvictionKind(Enum):
    """Why a pod is evicted; its value is the reason of the pod's Warning event."""

    PREEMPTED = "Preempted"  # for a job of its own queue (the preempt action)
    RECLAIMED = "Reclaimed"  # for a queue below its fair share (the reclaim action)


@dataclass(frozen=True, slots=True)
class Evict:
    pod: PodKey
    node: NodeName
    kind: EvictionKind
    message: str

    @property
    def reason(self) -> str:
        """The event reason: ``Preempted`` or ``Reclaimed``."""
        return self.kind.value


@dataclass(frozen=True, slots=True)
class Nomination:
    """A pod that runs on ``node`` once its victims are gone (Kubernetes' nominatedNodeName)."""

    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes event on a Pod (``pod`` is its key) or, with ``kind``, a PodGroup."""

    pod: PodKey
    type: str  # "Normal" or "Warning"
    reason: str
    message: str
    kind: str = "Pod"
