"""The one normalised form of a pod's GPU request."""

from __future__ import annotations

from dataclasses import dataclass

from kgpu.model.units import MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of GPUs, whatever dialect it was written in.

    ``count`` GPUs, each giving ``milli`` thousandths of its compute. A request for a share
    of one GPU has ``count == 1`` and ``milli < 1000``; a whole-GPU request has
    ``milli == 1000``. ``models`` restricts the GPU product (empty: any); the order is the
    user's order of preference.
    """

    count: int = 0
    milli: int = 0
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.count < 0 or self.milli < 0 or self.milli > MILLI_PER_GPU:
            raise ValueError(f"invalid GPU request count={self.count} milli={self.milli}")
        if self.count > 1 and self.milli != MILLI_PER_GPU:
            raise ValueError(f"a {self.count}-GPU request must take whole GPUs, not {self.milli}")

    @property
    def is_shared(self) -> bool:
        """True when the pod takes part of one GPU and leaves the rest to others."""
        return self.count == 1 and self.milli < MILLI_PER_GPU

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


NO_GPU = GpuRequest()


def whole_gpus(count: int, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=count, milli=MILLI_PER_GPU if count else 0, models=models)


def gpu_share(milli: int, models: tuple[str, ...] = ()) -> GpuRequest:
    return GpuRequest(count=1, milli=milli, models=models)
