"""What one GPU gives a request, and the per-node device tables of a ClusterState.

Every GPU is accounted in two figures: compute in milli (1000 = the whole GPU, what the
scheduling policies read) and memory in MiB. What a request takes of one GPU of a node
(its *need*) is:

==============================  ===================================  =====================
request                         compute (milli)                      memory (MiB)
==============================  ===================================  =====================
whole GPU                       1000                                 all of it
share, memory follows           ``milli``                            ``cap * milli // 1000``
share with a memory ratio       ``milli``                            ``cap * ratio // 1000``
share with memory in MiB        ``milli``                            ``memory_mib``
memory only (KAI gpu-memory)    ``ceil(memory_mib * 1000 / cap)``    ``memory_mib``
MPS: r replicas of R per GPU    ``r * (1000 // R)``                  ``cap * milli // 1000``
==============================  ===================================  =====================

Memory is rounded down, as Koordinator computes ``total × ratio``: then as long as every
allocation on a GPU is of the "memory follows" kind, compute that fits implies memory that
fits (Σ floor(cap·mᵢ/1000) ≤ cap·Σmᵢ/1000). A node keeps a count of the allocations that
are not (``gpu_odd``); filters check memory separately only on nodes where it is not zero,
so a trace of plain shares costs what it cost before memory was accounted. Every need
takes at least one milli of compute, so a GPU with all its compute free has all its memory
free too: "idle" stays a compute figure.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kgpu.model.devices import Device, NodeDevices, default_gpus
from kgpu.model.gpu import GpuKind, GpuRequest
from kgpu.model.node import NodeInfo
from kgpu.model.topology import GpuLinks
from kgpu.model.units import MILLI_PER_GPU

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def gpu_need(req: GpuRequest, memory_cap: int, replicas: int) -> tuple[int, int] | None:
    """(milli, MiB) that ``req`` takes of one GPU of ``memory_cap`` MiB on a node whose GPUs
    are split into ``replicas``; None when no GPU of that kind can serve it."""
    if req.kind is GpuKind.MPS:
        if replicas <= 1 or req.replicas > replicas:
            return None
        milli = req.replicas * (MILLI_PER_GPU // replicas)
        return milli, memory_cap * milli // MILLI_PER_GPU
    if req.memory_mib:
        if memory_cap < req.memory_mib:
            return None
        if req.milli == 0:
            return -(-req.memory_mib * MILLI_PER_GPU // memory_cap), req.memory_mib
        return req.milli, memory_cap if req.milli == MILLI_PER_GPU else req.memory_mib
    share = (
        req.milli if req.memory_milli is None or req.milli == MILLI_PER_GPU else req.memory_milli
    )
    return req.milli, memory_cap * share // MILLI_PER_GPU


@functools.cache
def _plain_devices(gpus: int, rdma: int, fpga: int) -> NodeDevices:
    """Shared by every node without a Device resource of the same counts."""
    return NodeDevices(
        gpus=default_gpus(gpus),
        rdma=tuple(Device(minor=i) for i in range(rdma)),
        fpga=tuple(Device(minor=i) for i in range(fpga)),
    )


def node_devices(node: NodeInfo) -> NodeDevices:
    """The node's devices: its Device resource, or what its labels and resources imply."""
    if node.devices is not None and node.devices.gpus:
        return node.devices
    if node.devices is None:
        return _plain_devices(node.gpu_count, node.rdma, node.fpga)
    rdma = node.devices.rdma if node.devices else ()
    fpga = node.devices.fpga if node.devices else ()
    return NodeDevices(
        gpus=default_gpus(node.gpu_count),
        rdma=rdma or tuple(Device(minor=i) for i in range(node.rdma)),
        fpga=fpga or tuple(Device(minor=i) for i in range(node.fpga)),
        links=node.devices.links if node.devices else None,
        checkpoints=node.devices.checkpoints if node.devices else (),
    )


class DeviceTables:
    """Per-node arrays of everything besides GPU compute, built once per ClusterState."""

    def __init__(self, nodes: Sequence[NodeInfo], max_gpus: int) -> None:
        n = len(nodes)
        self.devices = [node_devices(node) for node in nodes]
        # Nodes without a Device resource (most, and every trace node) are filled as arrays;
        # only the ones with a Device are looked at GPU by GPU.
        counts = np.array([node.gpu_count for node in nodes], dtype=np.int64).reshape(n)
        self.exists = np.arange(max_gpus)[None, :] < counts[:, None]
        memory = np.array([node.gpu_memory_mib for node in nodes], dtype=np.int64).reshape(n)
        self.memory_cap = np.where(self.exists, memory[:, None], 0)
        # GPUs a Device marks unhealthy: they offer nothing, but a rejection can name them.
        self.unhealthy = np.zeros(n, dtype=np.int64)
        for i, node in enumerate(nodes):
            if node.devices is None or not node.devices.gpus:
                continue
            self.exists[i] = False
            self.memory_cap[i] = 0
            for g, dev in enumerate(node.devices.gpus[:max_gpus]):
                if dev.healthy:
                    self.exists[i, g] = True
                    self.memory_cap[i, g] = dev.memory_mib or node.gpu_memory_mib
                elif g < node.gpu_count:
                    self.unhealthy[i] += 1
        self.replicas = np.array([max(1, node.gpu_replicas) for node in nodes], dtype=np.int64)
        self.mig_profiles = sorted({p for node in nodes for p, _ in node.mig})
        self.mig_ids = {p: i for i, p in enumerate(self.mig_profiles)}
        self.mig_cap = np.zeros((n, max(1, len(self.mig_profiles))), dtype=np.int64)
        for i, node in enumerate(nodes):
            for profile, count in node.mig:
                self.mig_cap[i, self.mig_ids[profile]] += count
        self.rdma_cap = np.array(
            [sum(d.healthy for d in devs.rdma) for devs in self.devices], dtype=np.int64
        )
        self.fpga_cap = np.array(
            [sum(d.healthy for d in devs.fpga) for devs in self.devices], dtype=np.int64
        )
        self.links: list[GpuLinks | None] = [
            devs.links if devs.links is not None and devs.links.size == len(devs.gpus) else None
            for devs in self.devices
        ]
        self.has_links = np.array([lk is not None for lk in self.links], dtype=np.bool_)


def free_devices(devices: Sequence[Device], busy: set[int]) -> list[tuple[int, int, str]]:
    """(slot, NUMA node, PCIe switch) of the healthy devices not in ``busy``."""
    return [(i, d.numa, d.pcie) for i, d in enumerate(devices) if d.healthy and i not in busy]
