"""Which GPUs of the chosen node a pod gets (for policies that do not choose themselves).

Whole-GPU requests always take the lowest-index fully idle GPUs. A share of one GPU goes to
the tightest GPU that fits (lowest index among equals) with ``GpuTightest``, or to a GPU
drawn uniformly among those that fit with ``GpuRandom``.

A node's row holds a handful of GPU slots, so the choices run in plain Python over the
row as a list: numpy's overhead per call would cost more than the work.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.interfaces import GpuChoicePlugin
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.state.cluster import ClusterState


def lowest_idle_gpus(state: ClusterState, node: int, count: int) -> tuple[int, ...]:
    free = state.gpu_free[node].tolist()
    return tuple([g for g, milli in enumerate(free) if milli == MILLI_PER_GPU][:count])


def tightest_gpu(state: ClusterState, node: int, milli: int) -> int:
    """The GPU with the least free milli that still covers ``milli``, lowest index first."""
    free = state.gpu_free[node].tolist()
    return min(((f, g) for g, f in enumerate(free) if f >= milli), default=(0, 0))[1]


class GpuTightest:
    name = names.GPU_TIGHTEST

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            return (tightest_gpu(state, node, pod.gpu.milli),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


class GpuRandom:
    name = names.GPU_RANDOM

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            fits = np.flatnonzero(state.gpu_free[node] >= pod.gpu.milli)
            return (int(fits[self.rng.integers(len(fits))]),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[GpuChoicePlugin]
_ = GpuTightest
_ = GpuRandom
