"""Nodes as the scheduler sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NewType

from kgpu.model.devices import NodeDevices
from kgpu.model.taints import Taint

NodeName = NewType("NodeName", str)

DEFAULT_MAX_PODS = 110


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's allocatable resources and the facts that filters read.

    ``gpu_model`` is the GPU product (GFD's ``nvidia.com/gpu.product``); every GPU of a node
    is of one model, as GFD reports it. ``gpu_memory_mib`` is per GPU.

    Devices beyond whole GPUs: ``gpu_replicas`` is how many MPS or time-sliced replicas each
    GPU is split into (``nvidia.com/gpu.replicas``; 1: none), ``mig`` the MIG instances per
    profile (``nvidia.com/mig-<profile>``), ``rdma`` and ``fpga`` whole devices. ``devices``
    is the node's Device resource (UUIDs, health, topology) when there is one.
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
    gpu_replicas: int = 1
    mig: tuple[tuple[str, int], ...] = ()
    rdma: int = 0
    fpga: int = 0
    devices: NodeDevices | None = None
