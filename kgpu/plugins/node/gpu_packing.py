"""GPU packing: share a partly used GPU first, then take GPUs of partly used nodes, and
open an idle node last.

Scores as the FGD paper's simulator defines them: 91..100 when a share fits a partly used
GPU (the tighter the higher), max(50 − k, 33) when k idle GPUs of a partly used node are
taken, and max(33 − G, G) on a node whose G GPUs are all idle. Pods without GPUs score 0.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names

_NO_FIT = np.iinfo(np.int64).max


class GpuPacking:
    name = names.GPU_PACKING
    cacheable = True

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        if pod.gpu.count == 0:
            return np.zeros(len(nodes), dtype=np.float64)
        state = cycle.state
        gpus = state.gpu_count[nodes]
        all_idle = state.gpu_idle_count[nodes] == gpus
        scores = np.full(len(nodes), float(max(50 - pod.gpu.count, 33)))
        if pod.gpu.is_shared:
            free = state.gpu_free[nodes]
            tightest = np.where(free >= pod.gpu.milli, free, _NO_FIT).min(axis=1)
            partial = tightest < MILLI_PER_GPU
            reuse = np.maximum(100 - (tightest * 100 // MILLI_PER_GPU) // 10, 50)
            scores = np.where(partial, reuse, float(max(50 - 1, 33)))
        return np.where(all_idle, np.maximum(33 - gpus, gpus), scores).astype(np.float64)


_: type[ScorePlugin] = GpuPacking
