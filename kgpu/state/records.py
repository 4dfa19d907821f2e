"""What a pod holds in a ClusterState."""

from __future__ import annotations

from dataclasses import dataclass

from kgpu.model.pod import PodKey


@dataclass(slots=True, init=False, unsafe_hash=True)
class Allocation:
    """What one pod holds: its node, its GPU slots and the milli it takes on each, the MiB
    it takes on each (``gpu_memory``, by slot as in ``gpus``), its MIG instances, and the
    RDMA and FPGA device slots it was given. Never changed once made (equal and hashed by
    its fields).

    A class with its ``__init__`` written out, not a named tuple: every placement, release
    and undo makes or reads one, and the compiled build reads a compiled class's fields
    directly, where it unpacks a tuple and unboxes its items through generic calls (and a
    named tuple's constructor, and a generated ``__init__``, stay Python there)."""

    pod: PodKey
    node: int
    gpus: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    gpu_memory: tuple[int, ...]
    odd: bool  # its memory is not its compute share (see kgpu.state.device_tables)
    mig_profile: int
    mig_count: int
    rdma: tuple[int, ...]
    fpga: tuple[int, ...]

    def __init__(
        self,
        pod: PodKey,
        node: int,
        gpus: tuple[int, ...],
        gpu_milli: int,
        cpu_milli: int,
        memory_mib: int,
        gpu_memory: tuple[int, ...] = (),
        odd: bool = False,
        mig_profile: int = -1,
        mig_count: int = 0,
        rdma: tuple[int, ...] = (),
        fpga: tuple[int, ...] = (),
    ) -> None:
        self.pod = pod
        self.node = node
        self.gpus = gpus
        self.gpu_milli = gpu_milli
        self.cpu_milli = cpu_milli
        self.memory_mib = memory_mib
        self.gpu_memory = gpu_memory
        self.odd = odd
        self.mig_profile = mig_profile
        self.mig_count = mig_count
        self.rdma = rdma
        self.fpga = fpga

    def __reduce__(self) -> tuple[type[Allocation], tuple[object, ...]]:
        # Pickled by its fields, as the named tuple it was: a compiled class has no
        # pickling of its own.
        return (
            Allocation,
            (self.pod, self.node, self.gpus, self.gpu_milli, self.cpu_milli, self.memory_mib,
             self.gpu_memory, self.odd, self.mig_profile, self.mig_count, self.rdma, self.fpga),
        )  # fmt: skip
