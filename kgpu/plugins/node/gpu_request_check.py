"""GpuRequestCheck (PreFilter): refuse, once and for good, a GPU request no GPU of the
cluster could ever hold.

A pod asking more GPU memory of one GPU than the largest GPU of the cluster has is not
waiting for room: no eviction and no release helps. It gets an unresolvable status naming
the field it was read from, the value and the most it could be, and the session moves on to
the other pods. (Whether a node has the room now is GpuFit's question.)

The largest GPU is looked up once per cluster state: nodes and their GPUs are fixed for the
life of a state, so a cycle costs one attribute test for every other pod.
"""

from __future__ import annotations

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import PreFilterPlugin
from kgpu.framework.status import Status
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.state.cluster import ClusterState


class GpuRequestCheck:
    name = names.GPU_REQUEST_CHECK

    def __init__(self) -> None:
        self._largest = 0
        self._bound_to = (0, 0)

    def largest_gpu_memory(self, state: ClusterState) -> int:
        bound_to = (state.serial, id(state))
        if bound_to != self._bound_to:
            self._largest = int(state.gpu_mem_cap.max(initial=0))
            self._bound_to = bound_to
        return self._largest

    def pre_filter(self, cycle: CycleState, pod: PodSpec) -> Status:
        want = pod.gpu.memory_mib
        if not want:
            return Status.success()
        largest = self.largest_gpu_memory(cycle.state)
        if want <= largest:
            return Status.success()
        field = pod.gpu.origin or "GPU memory"
        detail = (
            f"{field} asks {want} MiB of one GPU, expected at most {largest} MiB, "
            "the memory of the largest GPU in the cluster"
        )
        return Status.unresolvable(reasons.GPU_MEMORY_TOO_LARGE, detail, self.name)


_: type[PreFilterPlugin] = GpuRequestCheck
