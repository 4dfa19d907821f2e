"""GpuRandom: whole GPUs from the lowest-index idle ones, a share of one GPU to a GPU drawn
uniformly among those that fit (the FGD paper's random policy)."""

from __future__ import annotations

import numpy as np

from kgpu.framework.interfaces import GpuChoicePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus
from kgpu.state.cluster import ClusterState


class GpuRandom:
    name = names.GPU_RANDOM

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            fits = np.flatnonzero(state.gpu_free[node] >= pod.gpu.milli)
            return (int(fits[self.rng.integers(len(fits))]),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[GpuChoicePlugin] = GpuRandom
