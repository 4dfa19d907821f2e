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


@dataclass(frozen=True, slots=True, init=False)
class Bind:
    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...]
    gpu_milli: int

    # Written out, not generated: the generated __init__ of a frozen dataclass is Python
    # even in the compiled build, and sets each field through a call; compiled, this is
    # several times cheaper, and the record as frozen as before.
    def __init__(self, pod: PodKey, node: NodeName, gpus: tuple[int, ...], gpu_milli: int) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "gpu_milli", gpu_milli)


class EvictionKind(Enum):
    """Why a pod is evicted; its value is the reason of the pod's Warning event."""

    PREEMPTED = "Preempted"  # for a job of its own queue (the preempt action)
    RECLAIMED = "Reclaimed"  # for a queue below its fair share (the reclaim action)


@dataclass(frozen=True, slots=True, init=False)
class Evict:
    pod: PodKey
    node: NodeName
    kind: EvictionKind
    message: str

    # Written out, not generated: as ``Bind``'s.
    def __init__(self, pod: PodKey, node: NodeName, kind: EvictionKind, message: str) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "message", message)

    @property
    def reason(self) -> str:
        """The event reason: ``Preempted`` or ``Reclaimed``."""
        return self.kind.value


@dataclass(frozen=True, slots=True, init=False)
class Nomination:
    """A pod that runs on ``node`` once its victims are gone (Kubernetes' nominatedNodeName)."""

    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...]

    # Written out, not generated: as ``Bind``'s.
    def __init__(self, pod: PodKey, node: NodeName, gpus: tuple[int, ...]) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpus", gpus)


@dataclass(frozen=True, slots=True, init=False)
class Event:
    """A Kubernetes event on a Pod (``pod`` is its key) or, with ``kind``, a PodGroup."""

    pod: PodKey
    type: str  # "Normal" or "Warning"
    reason: str
    message: str
    kind: str = "Pod"

    # Written out, not generated: as ``Bind``'s.
    def __init__(
        self, pod: PodKey, type: str, reason: str, message: str, kind: str = "Pod"
    ) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "kind", kind)
