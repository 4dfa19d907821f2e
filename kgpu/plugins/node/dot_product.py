"""Dot-product (Tetris-style) alignment of the pod's demand with the node's free resources.

As the FGD paper's simulator defines it: both vectors are [CPU, total GPU milli], divided
by a fixed largest node (128 CPUs, 8 GPUs); the score is 100 × (1 − dot / 2), so the node
whose free resources align least with the demand (the fullest fitting node) wins.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names

MAX_SPEC_CPU = 128_000.0
MAX_SPEC_GPU = 8_000.0


class DotProduct:
    name = names.DOT_PRODUCT
    cacheable = True

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        cpu_left = state.cpu_free[nodes] / MAX_SPEC_CPU
        gpu_left = state.gpu_free_total[nodes] / MAX_SPEC_GPU
        dot = cpu_left * (pod.cpu_milli / MAX_SPEC_CPU) + gpu_left * (
            pod.gpu.total_milli / MAX_SPEC_GPU
        )
        return np.asarray(np.trunc(100.0 * (1.0 - dot / 2.0)), dtype=np.float64)


_: type[ScorePlugin] = DotProduct
