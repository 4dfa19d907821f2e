"""kgpu's default placement: fragmentation measured in GPU demand, ties broken by packing.

(Placeholder under evaluation: the weighting and tie-break are being tuned on the openb
traces; see docs/POLICY.md once written.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, GpuChoicePlugin, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.fragmentation import FragmentModel, TypicalPod
from kgpu.plugins.gpu_choice import lowest_idle_gpus
from kgpu.state.cluster import ClusterState


def demand_weighted(typical: list[TypicalPod], cpu_weight: float) -> list[TypicalPod]:
    raw = [t.weight * (t.gpu_milli * t.gpu_count if t.gpu_count else cpu_weight) for t in typical]
    total = sum(raw) or 1.0
    return [replace(t, weight=w / total) for t, w in zip(typical, raw, strict=True)]


class KgpuFragPack:
    name = names.KGPU_PACK
    cacheable = True

    def __init__(
        self,
        typical: list[TypicalPod],
        weighting: str = "demand",
        cpu_weight: float = 0.0,
        pack: float = 1e-3,
    ) -> None:
        self.typical = demand_weighted(typical, cpu_weight) if weighting == "demand" else typical
        self.pack = pack
        self._model: FragmentModel | None = None
        self._bound_to = 0

    def model(self, state: ClusterState) -> FragmentModel:
        if self._model is None or self._bound_to != id(state):
            self._model = FragmentModel(self.typical, state)
            self._bound_to = id(state)
        return self._model

    def _per_gpu(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        dec = self.model(state).decrease_if_shared(state, pod, nodes)
        left = state.gpu_free[nodes] - pod.gpu.milli
        return dec - self.pack * left

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        if pod.gpu.is_shared:
            per_gpu = self._per_gpu(state, pod, nodes)
            best = per_gpu.max(axis=1)
        else:
            best = self.model(state).decrease_if_whole(state, pod, nodes)
        idle_after = state.gpu_free_total[nodes] - pod.gpu.total_milli
        cpu_after = state.cpu_free[nodes] - pod.cpu_milli
        return np.asarray(best - self.pack * (idle_after + cpu_after / 16.0), dtype=np.float64)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            per_gpu = self._per_gpu(state, pod, np.array([node], dtype=np.int64))[0]
            return (int(np.argmax(per_gpu)),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[ScorePlugin] = KgpuFragPack
_g: type[GpuChoicePlugin] = KgpuFragPack
