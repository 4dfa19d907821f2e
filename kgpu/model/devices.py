"""A node's devices as its agent reports them (the ``Device`` resource), Kubernetes-free.

A node without a Device resource still has GPUs (the device plugin's ``nvidia.com/gpu`` and
GPU Feature Discovery's labels): they are minors ``0 .. count-1``, healthy, each with the
node's per-GPU memory. The Device resource adds what only the node knows: UUIDs, health,
per-GPU memory, where each device sits (NUMA node, PCIe switch), NVLink peers, RDMA and
FPGA devices, and which GPUs pods placed by someone else hold (the kubelet's checkpoint).

GPU slot ``i`` of a node in :class:`~kgpu.state.cluster.ClusterState` is ``gpus[i]`` here,
sorted by minor, so that the slot a decision names maps to one physical device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from kgpu.model.topology import GpuLinks

# NVIDIA's device plugin names the k-th replica of a shared GPU (MPS or time-slicing)
# ``<GPU uuid>::<k>``; the GPU is the part before ``::``.
_REPLICA: Final = re.compile(r"(?P<gpu>.+)::[0-9]{1,6}")


def replica_gpu(device_id: str) -> str:
    """The GPU a device plugin id names: ``GPU-1::3`` is a replica of ``GPU-1``."""
    match = _REPLICA.fullmatch(device_id)
    return device_id if match is None else match["gpu"]


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU, RDMA or FPGA device. ``memory_mib`` 0 means the node's per-GPU figure."""

    minor: int
    uuid: str = ""
    healthy: bool = True
    memory_mib: int = 0
    numa: int = -1  # NUMA node, -1 when unknown
    pcie: str = ""  # PCIe switch, "" when unknown


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Devices the kubelet gave a pod (Koordinator's ``node.koordinator.sh/devices-checkpoints``):
    which GPUs a pod holds, whoever placed it. The pod is named by UID, else (the kubelet's
    pod-resources API knows no UID) by namespace and name."""

    pod_uid: str
    resource: str
    device_ids: tuple[str, ...]
    pod_namespace: str = ""
    pod_name: str = ""


@dataclass(frozen=True, slots=True)
class NodeDevices:
    gpus: tuple[Device, ...] = ()
    rdma: tuple[Device, ...] = ()
    fpga: tuple[Device, ...] = ()
    links: GpuLinks | None = None  # indexed like ``gpus``
    checkpoints: tuple[Checkpoint, ...] = ()
    # Checkpoint entries not taken, each with why (malformed, or naming GPUs not listed).
    refused: tuple[str, ...] = ()
    # A GPU's slot by UUID, or by minor as a decimal string (a UUID wins): made once, as
    # every bound pod's checkpoint entry is looked up in it each session.
    _slot_of: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slot_of = {str(d.minor): i for i, d in enumerate(self.gpus)}
        slot_of.update({d.uuid: i for i, d in enumerate(self.gpus) if d.uuid})
        object.__setattr__(self, "_slot_of", slot_of)

    def gpu_slots_of(
        self, device_ids: tuple[str, ...], replicas: bool = False
    ) -> tuple[int, ...] | None:
        """The slots of GPUs named by UUID (or by minor as a decimal string); None if any
        is unknown. With ``replicas``, an id may name a replica of a GPU (``GPU-1::3``)."""
        slots = []
        for ident in device_ids:
            slot = self._slot_of.get(replica_gpu(ident) if replicas else ident)
            if slot is None:
                return None
            slots.append(slot)
        return tuple(sorted(set(slots)))


def default_gpus(count: int) -> tuple[Device, ...]:
    return tuple(Device(minor=i) for i in range(count))
