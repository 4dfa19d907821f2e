"""GpuFit: the node has devices of an allowed model with room for the request.

A share of one GPU needs one GPU whose free compute and free memory cover what the share
takes there; a request of k whole GPUs needs k fully idle GPUs (of at least the asked
memory, if it asks one). GPUs are never split across a multi-GPU request. MPS replicas
need a node whose GPUs are split into at least that many replicas; MIG instances, RDMA
and FPGA devices are counted per node.

Plain shares and whole GPUs (every trace pod) take the old path: one comparison per node
against the row summaries ``gpu_max_free`` and ``gpu_idle_count``. Memory needs a look only
on nodes holding an allocation whose memory is not its compute share (``gpu_odd``); see
:mod:`kgpu.state.device_tables` for why the others cannot run out of memory first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import BoolArray, IntArray, NodeByNodeFilter, Verdicts
from kgpu.framework.status import Reason
from kgpu.model.gpu import GpuKind, GpuRequest
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.plugins.node.filter_verdicts import asks_most, first_reasons, one_by_one
from kgpu.state.cluster import ClusterState
from kgpu.state.device_tables import gpu_need


def allowed_model_mask(
    state: ClusterState, models: tuple[str, ...], nodes: IntArray | None = None
) -> BoolArray:
    """Nodes (of ``nodes``, or of the whole cluster) whose GPU model is one of ``models``."""
    # A table over model ids (slot 0: no GPU model) turns the test into one gather.
    allowed = np.zeros(len(state.models) + 1, dtype=np.bool_)
    for model in models:
        if model in state.model_ids:
            allowed[state.model_ids[model] + 1] = True
    return allowed[(state.model_id if nodes is None else state.model_id[nodes]) + 1]


def gpu_needs(
    state: ClusterState, req: GpuRequest, nodes: IntArray
) -> tuple[BoolArray, IntArray, IntArray]:
    """Per node and GPU slot (K,G): can a GPU of that kind serve ``req`` at all, and the
    milli and MiB it takes there (the vector form of ``kgpu.state.device_tables.gpu_need``)."""
    # Rows by ``take``: indexing rows with an array copies them one by one, several times
    # slower.
    cap = state.gpu_mem_cap.take(nodes, axis=0)
    usable = state.gpu_exists.take(nodes, axis=0)
    if req.kind is GpuKind.MPS:
        replicas = state.gpu_replicas[nodes]
        ok = (replicas > 1) & (replicas >= req.replicas)
        milli = np.broadcast_to((req.replicas * (MILLI_PER_GPU // replicas))[:, None], cap.shape)
        return usable & ok[:, None], milli, cap * milli // MILLI_PER_GPU
    if req.memory_mib:
        usable = usable & (cap >= req.memory_mib)
        if req.milli == 0:
            milli = -(-req.memory_mib * MILLI_PER_GPU // np.maximum(cap, 1))
            return usable, milli, np.full(cap.shape, req.memory_mib, dtype=np.int64)
        memory = cap if req.milli == MILLI_PER_GPU else np.full(cap.shape, req.memory_mib)
        return usable, np.full(cap.shape, req.milli, dtype=np.int64), memory
    share = MILLI_PER_GPU if req.milli == MILLI_PER_GPU else req.memory_milli
    share = req.milli if share is None else share
    return usable, np.full(cap.shape, req.milli, dtype=np.int64), cap * share // MILLI_PER_GPU


def gpu_fits(state: ClusterState, req: GpuRequest, nodes: IntArray) -> tuple[BoolArray, BoolArray]:
    """(K,G): GPUs that can take ``req`` now, and GPUs that could if their memory allowed."""
    usable, milli, memory = gpu_needs(state, req, nodes)
    free = state.gpu_free.take(nodes, axis=0)
    if req.kind is GpuKind.GPU and req.milli == MILLI_PER_GPU:
        compute = usable & (free == MILLI_PER_GPU)  # idle compute means idle memory
        return compute, compute
    compute = usable & (free >= milli)
    return compute & (state.gpu_mem_free.take(nodes, axis=0) >= memory), compute


def row_fits(
    state: ClusterState, req: GpuRequest, node: int
) -> tuple[list[bool], list[bool], list[tuple[int, int] | None]]:
    """One node's GPUs, in plain Python (a handful of slots: cheaper than numpy): which
    can take ``req`` now, which have the compute for it, and what it takes of each."""
    count = int(state.gpu_count[node])
    free = state.gpu_free[node].tolist()
    mem_free = state.gpu_mem_free[node].tolist()
    caps = state.gpu_mem_cap[node].tolist()
    exists = state.gpu_exists[node].tolist()
    replicas = int(state.gpu_replicas[node])
    whole = req.kind is GpuKind.GPU and req.milli == MILLI_PER_GPU
    by_cap: dict[int, tuple[int, int] | None] = {}
    fits, compute, needs = [], [], []
    for g in range(count):
        cap = caps[g]
        if cap not in by_cap:
            by_cap[cap] = gpu_need(req, cap, replicas)
        need = by_cap[cap] if exists[g] else None
        has = need is not None and (free[g] == MILLI_PER_GPU if whole else free[g] >= need[0])
        needs.append(need)
        compute.append(has)
        fits.append(has and (whole or (need is not None and mem_free[g] >= need[1])))
    return fits, compute, needs


# Up to this many nodes, a filter call looks at each in Python (a cycle usually re-checks
# the one node the last placement changed); past it, the arrays are cheaper.
_FEW_NODES = 8
# The plain path's arrays are few and cheap, but its Python reads each node's figures as
# Python ints (``ClusterState.gpu_summary``): it wins up to a dozen or so nodes.
_FEW_PLAIN = 16


class GpuFit:
    """A node rejected for several reasons keeps the first: no GPU (or MPS, or MIG),
    model, room. A node short of room only because its Device marks GPUs unhealthy (whole
    GPUs: idle and unhealthy together would do; a share: any GPU is unhealthy) says so."""

    name = names.GPU_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        req = pod.gpu
        if req.plain:  # the hot path: no GPU, or whole GPUs, or a share memory follows
            if not req.count:
                return Verdicts.all_pass(len(nodes))
            if len(nodes) > _FEW_PLAIN:
                return self._plain(cycle.state, req, nodes)
            return one_by_one([_why_not_plain(cycle.state, req, n) for n in nodes.tolist()])
        if len(nodes) <= _FEW_NODES:
            return self._few(cycle.state, req, nodes)
        return self._many(cycle.state, req, nodes)

    def judges_one(self, pod: PodSpec) -> bool:
        return pod.gpu.plain  # the others' few-node path works on the nodes together

    def why_not_one(self, cycle: CycleState, pod: PodSpec, node: int) -> Reason | None:
        req = pod.gpu
        return _why_not_plain(cycle.state, req, node) if req.count else None

    @staticmethod
    def _many(state: ClusterState, req: GpuRequest, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        if req.models:
            verdicts.reject(
                reasons.GPU_MODEL_MISMATCH, ~allowed_model_mask(state, req.models, nodes)
            )
        if req.kind is GpuKind.MIG:
            profile = state.mig_ids.get(req.mig_profile)
            if profile is None:
                verdicts.reject(reasons.NO_MIG, np.ones(len(nodes), dtype=np.bool_))
            else:
                verdicts.reject(reasons.NO_MIG, state.mig_cap[nodes, profile] == 0)
                verdicts.reject(
                    reasons.INSUFFICIENT_MIG, state.mig_free[nodes, profile] < req.count
                )
        elif req.count:
            verdicts.reject(reasons.NO_GPU, state.gpu_count[nodes] == 0)
            usable, _, _ = gpu_needs(state, req, nodes)
            if req.kind is GpuKind.MPS:
                verdicts.reject(reasons.NO_MPS, ~np.any(usable, axis=1))
            fits, compute = gpu_fits(state, req, nodes)
            if req.is_shared:
                no_share = ~np.any(compute, axis=1)
                _reject_unhealthy(verdicts, state, req, nodes, no_share)
                verdicts.reject(reasons.INSUFFICIENT_GPU_SHARE, no_share)
                verdicts.reject(reasons.INSUFFICIENT_GPU_MEMORY, ~np.any(fits, axis=1))
            else:
                short = fits.sum(axis=1) < req.count
                enough_gpus = (state.gpu_idle_count[nodes] >= req.count) & short
                verdicts.reject(reasons.INSUFFICIENT_GPU_MEMORY, enough_gpus)
                _reject_unhealthy(verdicts, state, req, nodes, short)
                verdicts.reject(reasons.INSUFFICIENT_GPU, short)
        if req.rdma:
            verdicts.reject(reasons.INSUFFICIENT_RDMA, state.rdma_free[nodes] < req.rdma)
        if req.fpga:
            verdicts.reject(reasons.INSUFFICIENT_FPGA, state.fpga_free[nodes] < req.fpga)
        return verdicts

    @staticmethod
    def _few(state: ClusterState, req: GpuRequest, nodes: IntArray) -> Verdicts:
        """The same verdicts as the array path, node by node."""
        return one_by_one([_why_not(state, req, node) for node in nodes.tolist()])

    @staticmethod
    def _plain(state: ClusterState, req: GpuRequest, nodes: IntArray) -> Verdicts:
        if not state.odd_total and asks_most(state, nodes):
            return GpuFit._plain_over_all(state, req, nodes)
        no_gpu = state.gpu_count[nodes] == 0
        wrong_model = ~allowed_model_mask(state, req.models, nodes) if req.models else None
        memory_short = None
        if req.is_shared:
            short = state.gpu_max_free[nodes] < req.milli
            short_reason = reasons.INSUFFICIENT_GPU_SHARE
            if state.odd_total:
                # Only nodes holding odd allocations can lack memory where compute fits.
                odd = np.flatnonzero(~short & (state.gpu_odd[nodes] > 0))
                if 0 < len(odd) <= _FEW_NODES:
                    memory_short = np.zeros(len(nodes), dtype=np.bool_)
                    for i in odd.tolist():
                        memory_short[i] = not any(row_fits(state, req, int(nodes[i]))[0])
                elif len(odd):
                    fits, _ = gpu_fits(state, req, nodes[odd])
                    memory_short = np.zeros(len(nodes), dtype=np.bool_)
                    memory_short[odd[~np.any(fits, axis=1)]] = True
        else:
            short = state.gpu_idle_count[nodes] < req.count
            short_reason = reasons.INSUFFICIENT_GPU
        bad = no_gpu | short
        if wrong_model is not None:
            bad |= wrong_model
        if memory_short is not None:
            bad |= memory_short
        if not np.count_nonzero(bad):  # the common case: no reasons to sort out
            return Verdicts(~bad)
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(reasons.NO_GPU, no_gpu)
        if wrong_model is not None:
            verdicts.reject(reasons.GPU_MODEL_MISMATCH, wrong_model)
        _reject_unhealthy(verdicts, state, req, nodes, short)
        verdicts.reject(short_reason, short)
        if memory_short is not None:
            verdicts.reject(reasons.INSUFFICIENT_GPU_MEMORY, memory_short)
        return verdicts

    @staticmethod
    def _plain_over_all(state: ClusterState, req: GpuRequest, nodes: IntArray) -> Verdicts:
        """``_plain``'s verdicts, its tests run over the whole cluster (``filter_verdicts``),
        where no allocation's memory differs from its compute share (``odd_total``)."""
        tests = [(reasons.NO_GPU, state.gpu_count == 0)]
        if req.models:
            tests.append((reasons.GPU_MODEL_MISMATCH, ~allowed_model_mask(state, req.models)))
        if req.is_shared:
            short = state.gpu_max_free < req.milli
            short_reason = reasons.INSUFFICIENT_GPU_SHARE
        else:
            short = state.gpu_idle_count < req.count
            short_reason = reasons.INSUFFICIENT_GPU
        if state.gpu_unhealthy_total:  # as ``_reject_unhealthy``, before the shortage
            healthy = _would_fit_healthy(req, state.gpu_idle_count, state.gpu_unhealthy)
            tests.append((reasons.GPU_UNHEALTHY, short & healthy))
        tests.append((short_reason, short))
        return first_reasons(nodes, tests)


def _why_not_plain(state: ClusterState, req: GpuRequest, node: int) -> Reason | None:
    """``_plain``'s verdict on one node: no GPU, model, room (compute, then memory)."""
    info = state.nodes[node]
    if not info.gpu_count:
        return reasons.NO_GPU
    if req.models and not req.allows(info.gpu_model):
        return reasons.GPU_MODEL_MISMATCH
    idle, most = state.gpu_summary(node)
    if not req.is_shared:
        return _short_of(state, req, node) if idle < req.count else None
    if most < req.milli:
        return _short_of(state, req, node)
    if state.odd_total and state.gpu_odd[node] and not any(row_fits(state, req, node)[0]):
        return reasons.INSUFFICIENT_GPU_MEMORY
    return None


def _why_not(state: ClusterState, req: GpuRequest, node: int) -> Reason | None:
    """The first reason (in the array path's order) ``node`` cannot take ``req``."""
    if req.models and not req.allows(state.nodes[node].gpu_model):
        return reasons.GPU_MODEL_MISMATCH
    if req.kind is GpuKind.MIG:
        profile = state.mig_ids.get(req.mig_profile)
        if profile is None or state.mig_cap[node, profile] == 0:
            return reasons.NO_MIG
        if state.mig_free[node, profile] < req.count:
            return reasons.INSUFFICIENT_MIG
    elif req.count:
        if state.gpu_count[node] == 0:
            return reasons.NO_GPU
        fits, compute, needs = row_fits(state, req, node)
        if req.kind is GpuKind.MPS and all(n is None for n in needs):
            return reasons.NO_MPS
        if req.is_shared:
            if not any(compute):
                return _short_of(state, req, node)
            if not any(fits):
                return reasons.INSUFFICIENT_GPU_MEMORY
        elif sum(fits) < req.count:
            if state.gpu_idle_count[node] >= req.count:
                return reasons.INSUFFICIENT_GPU_MEMORY
            return _short_of(state, req, node)
    if req.rdma and state.rdma_free[node] < req.rdma:
        return reasons.INSUFFICIENT_RDMA
    if req.fpga and state.fpga_free[node] < req.fpga:
        return reasons.INSUFFICIENT_FPGA
    return None


def _would_fit_healthy(req: GpuRequest, idle: Any, unhealthy: Any) -> Any:
    """Whether a node short of room would have it were its unhealthy GPUs healthy (and so
    idle): whole GPUs, if idle and unhealthy ones together are enough; a share, if it has
    any unhealthy GPU. For one node or, elementwise, for arrays of them."""
    if req.is_shared:
        return unhealthy > 0
    return idle + unhealthy >= req.count


def _reject_unhealthy(
    verdicts: Verdicts, state: ClusterState, req: GpuRequest, nodes: IntArray, short: BoolArray
) -> None:
    """Of the ``short`` nodes, those short only for their unhealthy GPUs say so (to be
    called before the plain shortage is rejected: a node keeps its first reason)."""
    if not state.gpu_unhealthy_total:  # only nodes with a Device can have any
        return
    idle, unhealthy = state.gpu_idle_count[nodes], state.gpu_unhealthy[nodes]
    verdicts.reject(reasons.GPU_UNHEALTHY, short & _would_fit_healthy(req, idle, unhealthy))


def _short_of(state: ClusterState, req: GpuRequest, node: int) -> Reason:
    """Why ``node``, short of room for ``req``, cannot take it: the same rule, one node."""
    if state.gpu_unhealthy_total:  # only nodes with a Device can have any
        idle, unhealthy = int(state.gpu_idle_count[node]), int(state.gpu_unhealthy[node])
        if _would_fit_healthy(req, idle, unhealthy):
            return reasons.GPU_UNHEALTHY
    return reasons.INSUFFICIENT_GPU_SHARE if req.is_shared else reasons.INSUFFICIENT_GPU


_: type[NodeByNodeFilter] = GpuFit
