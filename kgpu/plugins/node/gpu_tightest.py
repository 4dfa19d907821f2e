"""GpuTightest: whole GPUs from the lowest-index idle ones, a share of one GPU to the
tightest GPU that fits (lowest index among equals)."""

from __future__ import annotations

from kgpu.framework.interfaces import GpuChoicePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus, tightest_gpu
from kgpu.state.cluster import ClusterState


class GpuTightest:
    name = names.GPU_TIGHTEST

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            return (tightest_gpu(state, node, pod.gpu.milli),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[GpuChoicePlugin] = GpuTightest
