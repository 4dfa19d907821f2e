"""A node's GPUs as the kubelet knows them, for a node where NVML cannot be loaded.

The device plugin registered its GPUs with the kubelet: the agent reads their ids from
the pod-resources API's GetAllocatableResources (kubelet 1.21+, with each GPU's NUMA
node) or else from the kubelet's checkpoint file (``Data.RegisteredDevices``, the
healthy ones). :class:`KubeletGpuProbe` answers the agent's
:class:`~kgpu.agent.probe.GpuProbe` questions from them, so the inventory, the Device and
the loop are those of an NVML node: a GPU's ``uuid`` is the device plugin's id (a UUID
for NVIDIA's plugin, ``fake-gpu-2`` for a test node's), its minor the id's place in
natural order (``fake-gpu-10`` after ``fake-gpu-9``; a GPU listed later takes the next
minor, so none moves), its memory the Node's
``nvidia.com/gpu.memory`` label (GPU feature discovery's, MiB) where there is one. On a
node whose GPUs NVIDIA's plugin shares (MPS or time-slicing, renamed
``nvidia.com/gpu.shared``), each GPU is listed once per replica, ``GPU-…::3``: the GPU is
the id before ``::``.
What only NVML knows (product, PCI bus id, NVLinks, XIDs) is not claimed: links are
"SYS", the farthest kind.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Final

from kgpu.agent.kubelet import CheckpointError, read_registered_of
from kgpu.agent.pod_resources_client import (
    GPU_RESOURCE,
    AllocatableDevice,
    PodResourcesClient,
    PodResourcesError,
)
from kgpu.agent.probe import GpuFacts, GpuUnreadable, NvLink, ProbeError, Xid
from kgpu.model.devices import replica_gpu

log = logging.getLogger(__name__)
NO_DRIVER: Final = "unknown (no NVML: GPUs as the kubelet lists them)"
_SYSTEM: Final = 50  # nvmlTopologySystem: the kind that claims nothing
SHARED_GPU_RESOURCE: Final = "nvidia.com/gpu.shared"


def natural_key(device_id: str) -> list[str | int]:
    """``fake-gpu-10`` after ``fake-gpu-9``: runs of digits compare as numbers."""
    parts = re.split(r"(\d+)", device_id)
    return [int(p) if i % 2 else p for i, p in enumerate(parts)]


class KubeletGpuProbe:
    """The kubelet's GPUs, read again at each ``count()`` (each round's first question).
    A GPU once listed keeps its minor; one the kubelet stops listing answers
    GpuUnreadable, so the inventory keeps it, unhealthy, with why."""

    def __init__(
        self,
        pod_resources: PodResourcesClient | None,
        checkpoint: Path | None,
        memory_mib: int = 0,  # 0: not known (the scheduler takes the node's figure)
        resources: tuple[str, ...] = (GPU_RESOURCE, SHARED_GPU_RESOURCE),
    ) -> None:
        self.pod_resources = pod_resources
        self.checkpoint = checkpoint
        self.memory_mib = memory_mib
        self.resources = resources
        self._resource_of: dict[str, str] = {}  # a GPU's resource, for messages
        self.source = ""  # where the last count() read the GPUs
        self._seen: list[str] = []  # every id listed so far, in natural order
        self._listed: dict[str, int] = {}  # the ids listed now, with their NUMA node

    def _read(self) -> tuple[list[AllocatableDevice], str]:
        """The GPUs of every resource, each once (replicas of a shared GPU are one GPU)."""
        by_resource, source = self._read_ids()
        gpus: dict[str, AllocatableDevice] = {}
        for resource in self.resources:
            for device in by_resource.get(resource, ()):
                gpu = replica_gpu(device.id)
                if gpu not in gpus:
                    gpus[gpu] = AllocatableDevice(gpu, device.numa)
                    self._resource_of[gpu] = resource
        return list(gpus.values()), source

    def _read_ids(self) -> tuple[dict[str, list[AllocatableDevice]], str]:
        client = self.pod_resources
        if client is not None and client.socket.exists():
            try:
                found = client.allocatable_of(self.resources)
            except PodResourcesError as exc:
                raise ProbeError(f"the kubelet's GPUs cannot be read: {exc}") from exc
            if found is not None:
                return found, f"pod-resources GetAllocatableResources at {client.socket}"
        if self.checkpoint is None:
            return {}, "nowhere (no pod-resources GetAllocatableResources, no checkpoint file)"
        try:
            ids = read_registered_of(self.checkpoint, self.resources) or {}
        except CheckpointError as exc:
            raise ProbeError(f"the kubelet's GPUs cannot be read: {exc}") from exc
        listed = {r: [AllocatableDevice(i) for i in found] for r, found in ids.items()}
        return listed, f"checkpoint file {self.checkpoint}"

    def count(self) -> int:
        found, source = self._read()
        if source != self.source:
            named = sorted({self._resource_of[d.id] for d in found}) or [self.resources[0]]
            log.info("%s GPUs read from the kubelet's %s", " and ".join(named), source)
            self.source = source
        self._listed = {d.id: d.numa for d in found}
        # New ids take the next minors, in natural order among themselves: a GPU listed
        # before keeps its minor, which the scheduler's books and pods' records name.
        known = set(self._seen)
        self._seen += sorted({d.id for d in found if d.id not in known}, key=natural_key)
        return len(self._seen)

    def driver_version(self) -> str:
        return NO_DRIVER

    def gpu(self, index: int) -> GpuFacts:
        device = self._seen[index]
        if device not in self._listed:
            resource = self._resource_of.get(device, self.resources[0])
            raise GpuUnreadable(
                f"the kubelet no longer lists {resource} {device}: its device plugin found it "
                "unhealthy, or is gone"
            )
        return GpuFacts(
            index=index,
            minor=index,
            uuid=device,
            product="",
            memory_mib=self.memory_mib,
            bus_id="",
            numa=self._listed[device],
        )

    def nvlinks(self, index: int) -> list[NvLink]:
        return []

    def nvlink_p2p(self, a: int, b: int) -> bool:
        return False

    def ancestor(self, a: int, b: int) -> int:
        return _SYSTEM

    def xids(self, timeout: float) -> list[Xid] | None:
        return None

    def close(self) -> None:
        if self.pod_resources is not None:
            self.pod_resources.close()


def gfd_memory_mib(labels: dict[str, str]) -> int:
    """GPU feature discovery's ``nvidia.com/gpu.memory`` (MiB per GPU); 0 where absent or
    not a count."""
    text = labels.get("nvidia.com/gpu.memory", "")
    # ASCII digits only: str.isdigit() also passes "²", which int() refuses.
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else 0
