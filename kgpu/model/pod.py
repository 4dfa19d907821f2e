"""Pods as the scheduler sees them: requests and constraints, parsed once at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NewType

from kgpu.model.gpu import NO_GPU, GpuRequest
from kgpu.model.taints import Toleration

PodKey = NewType("PodKey", str)  # "namespace/name"


@dataclass(frozen=True, slots=True)
class PodSpec:
    """One pod's scheduling request.

    ``shape`` is what placement depends on besides the cluster state: two pods of the same
    shape get the same filter verdicts and scores on the same node, which the framework uses
    to reuse per-node work between pods.
    """

    key: PodKey
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu: GpuRequest = NO_GPU
    priority: int = 0
    queue: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def placement_key(self) -> tuple[object, ...]:
        """The part of the shape that filters with static verdicts read: where the pod
        may go, whatever it asks for."""
        return (self.node_selector, self.tolerations)

    @property
    def shape(self) -> tuple[object, ...]:
        return (
            self.cpu_milli,
            self.memory_mib,
            self.gpu,
            self.node_selector,
            self.tolerations,
        )
