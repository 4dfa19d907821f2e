"""GPU clustering: keep pods of one GPU kind together (shares with shares, k-GPU with k-GPU).

As the FGD paper's simulator scores it: 25 × used-GPU share of an 8-GPU node, plus 75 if
the node holds only pods of this pod's kind, 50 if it holds this kind among others, 25 if
it holds no GPU pod, 0 if only other kinds. Pods without GPUs score 0 everywhere.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.dot_product import MAX_SPEC_GPU


class GpuClustering:
    name = names.GPU_CLUSTERING
    cacheable = True

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        if pod.gpu.count == 0:
            return np.zeros(len(nodes), dtype=np.float64)
        state = cycle.state
        kinds = state.gpu_pod_kinds[nodes]
        own = kinds[:, 0 if pod.gpu.is_shared else pod.gpu.count] > 0
        kinds_present = (kinds > 0).sum(axis=1)
        offset = np.where(
            own,
            np.where(kinds_present == 1, 75, 50),
            np.where(kinds_present == 0, 25, 0),
        )
        used = MAX_SPEC_GPU - state.gpu_free_total[nodes]
        base = np.trunc(25 * used / MAX_SPEC_GPU)
        return np.asarray(base + offset, dtype=np.float64)


_: type[ScorePlugin] = GpuClustering
