"""GpuFit: the node has GPUs of an allowed model with room for the request.

A share of one GPU needs one GPU whose free milli covers the share; a request of k whole
GPUs needs k fully idle GPUs. GPUs are never split across a multi-GPU request.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import BoolArray, FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.state.cluster import ClusterState


def allowed_model_mask(state: ClusterState, models: tuple[str, ...], nodes: IntArray) -> BoolArray:
    """Nodes (of ``nodes``) whose GPU model is one of ``models``."""
    ids = [state.model_ids[m] for m in models if m in state.model_ids]
    return np.asarray(np.isin(state.model_id[nodes], ids), dtype=np.bool_)


class GpuFit:
    name = names.GPU_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        req = pod.gpu
        if req.count == 0:
            return verdicts
        state = cycle.state
        verdicts.reject(reasons.NO_GPU, state.gpu_count[nodes] == 0)
        if req.models:
            verdicts.reject(
                reasons.GPU_MODEL_MISMATCH, ~allowed_model_mask(state, req.models, nodes)
            )
        if req.is_shared:
            verdicts.reject(reasons.INSUFFICIENT_GPU_SHARE, state.gpu_max_free[nodes] < req.milli)
        else:
            verdicts.reject(reasons.INSUFFICIENT_GPU, state.gpu_idle_count[nodes] < req.count)
        return verdicts


_: type[FilterPlugin] = GpuFit
