"""kgpu's default placement: FGD's judgement first, best-fit packing among its equals.

FGD scores a node by int(100 × sigmoid(ΔF / 1000)), ΔF being how much the node's
fragmentation (measured against the workload's typical pods) drops with the placement.
The sigmoid saturates and the integer cut merges close values, so in a large cluster many
nodes share the best score, and FGD leaves the choice among them to a random order. That
choice is not neutral:

- a pod without GPUs scores 50 almost everywhere, and the random pick spends CPU on nodes
  whose idle GPUs then lack the CPU to be used;
- a share or a whole GPU placed on a nearly empty node opens GPUs that a later pod of the
  same kind could have found already open elsewhere.

Among the nodes with FGD's best integer score this plugin takes the one left with the least
idle GPU and CPU after the placement (best fit, each share of the cluster's largest node),
and inside a node the tightest GPU among those FGD scores equally. The packing term is kept
below one score point, so it never overrides FGD's own preference: the policy is FGD with a
tie-break that packs.

Kept below one point on purpose: letting packing outweigh fragmentation was tried on the
openb traces and did not help, and a raw (unsaturated) ΔF did worse than FGD (see
docs/POLICY.md for the figures).
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

# The packing term stays strictly inside one FGD score point.
PACKING_SPAN = 0.99
# Inside a node, a tighter GPU wins only among GPUs of equal FGD score.
_GPU_TIGHTNESS = 1e-6


class FragPacking:
    name = names.FRAG_PACKING
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
            fgd = np.round(self._per_gpu(state, pod, nodes).max(axis=1))
        else:
            fgd = sigmoid_score(self.fgd.model(state).decrease_if_whole(state, pod, nodes))
        # Shares of the cluster's largest node, so the slack stays within 0..1 anywhere.
        gpu_span = max(int(state.gpu_count.max(initial=0)) * MILLI_PER_GPU, 1)
        cpu_span = max(int(state.cpu_cap.max(initial=0)), 1)
        idle_after = (state.gpu_free_total[nodes] - pod.gpu.total_milli) / gpu_span
        cpu_after = (state.cpu_free[nodes] - pod.cpu_milli) / cpu_span
        slack = np.clip(0.5 * idle_after + 0.5 * cpu_after, 0.0, 1.0)
        return np.asarray(fgd + PACKING_SPAN * (1.0 - slack), dtype=np.float64)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            per_gpu = self._per_gpu(state, pod, np.array([node], dtype=np.int64))[0]
            return (int(np.argmax(per_gpu)),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[ScorePlugin] = FragPacking
_g: type[GpuChoicePlugin] = FragPacking
