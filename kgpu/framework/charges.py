"""What a pod's GPU request counts toward its queue's share and quota, in milli-GPU.

A pod asking for a share of a GPU counts that share (half a GPU: 500); whole GPUs count
1000 each. Some requests take a share that depends on the GPU they get
(:mod:`kgpu.state.device_tables`), and count that share:

- memory only (KAI's ``gpu-memory``): ``ceil(memory_mib * 1000 / cap)`` of a GPU of
  ``cap`` MiB (:func:`~kgpu.model.resources.gpu_memory_share`): 20 GiB of an 80 GiB GPU
  counts 250, of a 40 GiB GPU 500;
- MPS: ``r`` replicas of a GPU split ``R`` ways count ``r * (1000 // R)``;
- MIG: each instance counts its compute slices of seven
  (:func:`~kgpu.model.resources.mig_share`: a ``1g.10gb`` is 143).

A running or placed pod counts exactly what its allocation takes (``held``): the session
charges that when it places a pod and takes the same back when it evicts it, so the two
cannot differ. A pending pod has no GPU yet: quota checks, enqueue and the demand that
fair shares divide count it as the largest share it could take on any GPU of the
schedulable nodes that can serve it (its models, enough memory, enough replicas), so it is
never counted as less than it will hold, and a placement that passed a quota check never
takes its queue past the limit (``asked``). On a cluster of one GPU size the two agree.
"""

from __future__ import annotations

import numpy as np

from kgpu.model.gpu import GpuKind, GpuRequest
from kgpu.model.resources import gpu_memory_share, mig_share
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import ClusterState
from kgpu.state.records import Allocation


class GpuCharges:
    """The milli-GPU that requests and allocations count, over one ClusterState."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._mig = [mig_share(profile) for profile in state.mig_profiles]
        self._asked: dict[GpuRequest, int] = {}

    def held(self, alloc: Allocation) -> int:
        """What a pod holding ``alloc`` counts: its take of each GPU, and its MIG instances."""
        milli = alloc.gpu_milli * len(alloc.gpus)
        if alloc.mig_count:
            milli += alloc.mig_count * self._mig[alloc.mig_profile]
        return milli

    def asked(self, gpu: GpuRequest) -> int:
        """What a pending pod with this request counts (the most it could take)."""
        if gpu.milli or not gpu.count:
            return gpu.total_milli
        found = self._asked.get(gpu)
        if found is None:
            found = self._asked[gpu] = self._largest(gpu)
        return found

    def _largest(self, gpu: GpuRequest) -> int:
        if gpu.kind is GpuKind.MIG:
            return gpu.count * mig_share(gpu.mig_profile)
        state = self.state
        nodes = state.schedulable & (state.gpu_count > 0)
        if gpu.models:
            ids = [state.model_ids[m] for m in gpu.models if m in state.model_ids]
            nodes &= np.isin(state.model_id, ids)
        if gpu.kind is GpuKind.MPS:
            split = state.gpu_replicas[nodes & (state.gpu_replicas >= max(2, gpu.replicas))]
            if not len(split):
                return MILLI_PER_GPU  # no GPU serves it: count it as the GPU it would need
            return gpu.replicas * (MILLI_PER_GPU // int(split.min()))
        caps = state.gpu_mem_cap[nodes][state.gpu_exists[nodes]]
        caps = caps[caps >= gpu.memory_mib]
        if not len(caps):
            return MILLI_PER_GPU
        return gpu_memory_share(gpu.memory_mib, int(caps.min()))
