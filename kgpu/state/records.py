"""What a pod holds in a ClusterState, and the error for an impossible change."""

from __future__ import annotations

from typing import NamedTuple

from kgpu.model.pod import PodKey


class AllocationError(RuntimeError):
    """An allocate or release that would break the state's invariants (a bug, not bad input)."""


class Allocation(NamedTuple):
    """What one pod holds: its node, its GPU slots and the milli it takes on each, the MiB
    it takes on each (``gpu_memory``, by slot as in ``gpus``), its MIG instances, and the
    RDMA and FPGA device slots it was given.

    A named tuple rather than a frozen dataclass: every placement makes one, and a frozen
    dataclass of this many fields costs a microsecond to build, a named tuple a fifth."""

    pod: PodKey
    node: int
    gpus: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    gpu_memory: tuple[int, ...] = ()
    odd: bool = False  # its memory is not its compute share (see kgpu.state.device_tables)
    mig_profile: int = -1
    mig_count: int = 0
    rdma: tuple[int, ...] = ()
    fpga: tuple[int, ...] = ()
