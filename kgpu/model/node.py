"""Nodes as the scheduler sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NewType

from kgpu.model.taints import Taint

NodeName = NewType("NodeName", str)

DEFAULT_MAX_PODS = 110


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's allocatable resources and the facts that filters read.

    ``gpu_model`` is the GPU product (GFD's ``nvidia.com/gpu.product``); every GPU of a node
    is of one model, as GFD reports it. ``gpu_memory_mib`` is per GPU.
    """

    name: NodeName
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    max_pods: int = DEFAULT_MAX_PODS
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
