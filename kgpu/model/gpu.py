"""The one normalised form of a pod's GPU (and other device) request.

Whatever dialect a pod was written in (``nvidia.com/gpu``, Koordinator's ``kubernetes.io/gpu*``,
KAI's ``gpu-fraction``/``gpu-memory`` annotations, ``nvidia.com/gpu.shared``,
``nvidia.com/mig-<profile>``), the edge turns it into one :class:`GpuRequest`. Three kinds:

- ``GPU``: ``count`` GPUs, each giving ``milli`` thousandths of its compute. Memory follows
  the compute share (the common case, "proportional") unless ``memory_milli`` (a share of
  the GPU's memory) or ``memory_mib`` (MiB per GPU) says otherwise. ``milli == 0`` with
  ``memory_mib`` set means the compute share follows the memory, as KAI's ``gpu-memory``
  does: on a GPU of M MiB the pod takes ``ceil(memory_mib * 1000 / M)`` milli.
- ``MPS``: ``replicas`` MPS (or time-sliced) replicas of one GPU; on a node whose GPUs are
  split ``R`` ways that is ``replicas * (1000 // R)`` milli of one GPU.
- ``MIG``: ``count`` MIG instances of profile ``mig_profile``; they are their own devices
  and take no GPU slot.

What a request takes of a GPU therefore depends on the node for memory-sized and MPS
requests; :mod:`kgpu.state.device_tables` resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kgpu.model.units import MILLI_PER_GPU


class GpuKind(StrEnum):
    GPU = "gpu"
    MPS = "mps"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of GPUs and other devices, whatever dialect it was written in.

    ``count`` GPUs, each giving ``milli`` thousandths of its compute. A request for a share
    of one GPU has ``count == 1`` and ``milli < 1000``; a whole-GPU request has
    ``milli == 1000``. ``models`` restricts the GPU product (empty: any); the order is the
    user's order of preference. ``rdma`` and ``fpga`` are whole devices. ``origin`` names
    the field the request was read from, for messages; it is not part of the request.
    """

    count: int = 0
    milli: int = 0
    models: tuple[str, ...] = ()
    memory_milli: int | None = None  # None: the memory share equals the compute share
    memory_mib: int = 0
    kind: GpuKind = GpuKind.GPU
    replicas: int = 0
    mig_profile: str = ""
    rdma: int = 0
    fpga: int = 0
    origin: str = field(default="", compare=False)
    # Worked out once: every cycle hashes the pod's shape and asks what kind of request it is.
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _proportional: bool = field(default=False, init=False, repr=False, compare=False)
    _plain: bool = field(default=False, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        self._check()
        key = (self.count, self.milli, self.models, self.memory_milli, self.memory_mib,
               self.kind, self.replicas, self.mig_profile, self.rdma, self.fpga)  # fmt: skip
        object.__setattr__(self, "_hash", hash(key))
        object.__setattr__(
            self,
            "_proportional",
            self.kind is GpuKind.GPU
            and self.memory_milli is None
            and self.memory_mib == 0
            and self.milli > 0,
        )
        plain = (self._proportional or self.count == 0) and not (self.rdma or self.fpga)
        object.__setattr__(self, "_plain", plain)

    def _check(self) -> None:
        counts = (self.count, self.milli, self.memory_mib, self.replicas, self.rdma, self.fpga)
        if min(counts) < 0 or self.milli > MILLI_PER_GPU:
            raise ValueError(f"invalid GPU request {self!r}")
        if self.memory_milli is not None and not 0 <= self.memory_milli <= MILLI_PER_GPU:
            raise ValueError(f"invalid GPU memory share {self.memory_milli}")
        if self.kind is GpuKind.GPU:
            if self.count > 1 and self.milli != MILLI_PER_GPU:
                raise ValueError(
                    f"a {self.count}-GPU request must take whole GPUs, not {self.milli}"
                )
        elif self.kind is GpuKind.MPS:
            if self.count != 1 or self.milli or self.replicas < 1:
                raise ValueError(f"an MPS request is one GPU's replicas, not {self!r}")
        elif self.milli or not self.mig_profile or self.count < 1:
            raise ValueError(f"a MIG request is a count of one profile, not {self!r}")

    @property
    def is_shared(self) -> bool:
        """True when the pod takes part of one GPU and leaves the rest to others."""
        return self.count == 1 and self.milli < MILLI_PER_GPU and self.kind is not GpuKind.MIG

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    @property
    def gpu_slots(self) -> int:
        """How many GPUs of the node the request occupies (MIG instances occupy none)."""
        return 0 if self.kind is GpuKind.MIG else self.count

    @property
    def proportional(self) -> bool:
        """A plain request whose memory is its compute share: what every trace pod is.

        Only these use the single-number fast paths of filters; see ``kgpu.state.device_tables``.
        """
        return self._proportional

    @property
    def plain(self) -> bool:
        """Proportional (or no GPU) and no other devices: the hot path's requests."""
        return self._plain

    @property
    def wants_devices(self) -> bool:
        return self.count > 0 or self.rdma > 0 or self.fpga > 0

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


NO_GPU = GpuRequest()


def whole_gpus(count: int, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=count, milli=MILLI_PER_GPU if count else 0, models=models)


def gpu_share(milli: int, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=1, milli=milli, models=models)


def mps_replicas(replicas: int = 1, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=1, kind=GpuKind.MPS, replicas=replicas, models=models)


def mig_instances(profile: str, count: int = 1, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=count, kind=GpuKind.MIG, mig_profile=profile, models=models)
