"""kgpu's default placement: FGD, with pods that ask for no GPU kept off idle GPUs.

FGD scores a node by int(100 × sigmoid(ΔF / 1000)), ΔF being how much the node's
fragmentation (measured against the workload's typical pods) drops with the placement.
For a pod that asks for no GPU, ΔF is zero on almost every node: its CPU and memory change
no typical pod's fit, so FGD scores 50 everywhere and leaves the choice to a random order
of the nodes. That choice is not neutral. CPU spent on a node with idle GPUs is CPU that a
later GPU pod needs there; enough of it and those GPUs are stranded.

So among the nodes with FGD's best score, a GPU-less pod goes to the node with the fewest
idle GPUs (ideally none: its CPU is then of no use to GPU work), and among those to the one
with the most CPU to spare, so no single node is drained. GPU pods are placed exactly as FGD
places them, except that inside a node a share goes to the tightest of the GPUs FGD scores
equally (FGD takes the lowest index).

The tie-break is kept below one score point, so FGD's own preference always wins. Other
tie-breaks were measured on the openb traces and rejected (docs/POLICY.md): best-fit
packing of GPU pods helps GPU-model-constrained workloads but loses elsewhere, and an
unsaturated ΔF is clearly worse than FGD's integer sigmoid.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, GpuChoicePlugin, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.plugins.fgd import FgdScore, sigmoid_score
from kgpu.plugins.fragmentation import TypicalPod
from kgpu.plugins.gpu_choice import lowest_idle_gpus
from kgpu.state.cluster import ClusterState

# The tie-break stays strictly inside one FGD score point.
TIE_SPAN = 0.99
# Among nodes with equally few idle GPUs, spare CPU counts this much (idle GPUs count 1).
CPU_SPARE_WEIGHT = 0.5
# Inside a node, a tighter GPU wins only among GPUs of equal FGD score.
_GPU_TIGHTNESS = 1e-6


class StrandAwareFgd:
    name = names.STRAND_AWARE_FGD
    cacheable = True

    def __init__(self, typical: list[TypicalPod]) -> None:
        self.fgd = FgdScore(typical)

    def _per_gpu(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        decrease = self.fgd.model(state).decrease_if_shared(state, pod, nodes)
        fits = np.isfinite(decrease)
        scores = sigmoid_score(np.where(fits, decrease, 0.0))
        left = state.gpu_free[nodes] - pod.gpu.milli
        return np.where(fits, scores - _GPU_TIGHTNESS * left, -np.inf)

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        if pod.gpu.is_shared:
            per_gpu = self._per_gpu(state, pod, nodes)
            self.fgd.memo.record(state, pod, nodes, per_gpu.argmax(axis=1))
            return np.asarray(np.round(per_gpu.max(axis=1)))
        fgd = sigmoid_score(self.fgd.model(state).decrease_if_whole(state, pod, nodes))
        if pod.gpu.count:
            return fgd
        # Shares of the cluster's largest node keep the tie-break within 0..1 anywhere.
        gpu_span = max(int(state.gpu_count.max(initial=0)) * MILLI_PER_GPU, 1)
        cpu_span = max(int(state.cpu_cap.max(initial=0)), 1)
        idle_gpu = state.gpu_free_total[nodes] / gpu_span
        cpu_short = 1.0 - (state.cpu_free[nodes] - pod.cpu_milli) / cpu_span
        stranding = (idle_gpu + CPU_SPARE_WEIGHT * cpu_short) / (1.0 + CPU_SPARE_WEIGHT)
        return np.asarray(fgd + TIE_SPAN * (1.0 - np.clip(stranding, 0.0, 1.0)))

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            known = self.fgd.memo.lookup(state, pod, node)
            if known is not None:
                return (known,)
            per_gpu = self._per_gpu(state, pod, np.array([node], dtype=np.int64))[0]
            return (int(np.argmax(per_gpu)),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[ScorePlugin] = StrandAwareFgd
_g: type[GpuChoicePlugin] = StrandAwareFgd
