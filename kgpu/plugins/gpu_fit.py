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
    # A table over model ids (slot 0: no GPU model) turns the test into one gather.
    allowed = np.zeros(len(state.models) + 1, dtype=np.bool_)
    for model in models:
        if model in state.model_ids:
            allowed[state.model_ids[model] + 1] = True
    return allowed[state.model_id[nodes] + 1]


class GpuFit:
    """A node rejected for several reasons keeps the first: no GPU, model, room."""

    name = names.GPU_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        req = pod.gpu
        if req.count == 0:
            return Verdicts.all_pass(len(nodes))
        state = cycle.state
        no_gpu = state.gpu_count[nodes] == 0
        wrong_model = ~allowed_model_mask(state, req.models, nodes) if req.models else None
        if req.is_shared:
            short = state.gpu_max_free[nodes] < req.milli
            short_reason = reasons.INSUFFICIENT_GPU_SHARE
        else:
            short = state.gpu_idle_count[nodes] < req.count
            short_reason = reasons.INSUFFICIENT_GPU
        bad = no_gpu | short
        if wrong_model is not None:
            bad |= wrong_model
        if not np.count_nonzero(bad):  # the common case: no reasons to sort out
            return Verdicts(~bad)
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(reasons.NO_GPU, no_gpu)
        if wrong_model is not None:
            verdicts.reject(reasons.GPU_MODEL_MISMATCH, wrong_model)
        verdicts.reject(short_reason, short)
        return verdicts


_: type[FilterPlugin] = GpuFit
