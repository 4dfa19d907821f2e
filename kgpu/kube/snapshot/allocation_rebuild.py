"""Bound pods accounted on a fresh ClusterState: what a restarted scheduler knows.

- A pod kgpu placed holds exactly what its ``kgpu.io/device-allocation`` annotation records:
  the same GPU minors, the same milli and MiB on each, the same RDMA and FPGA minors and
  MIG instances, so the rebuilt state equals the one the scheduler had before it stopped
  (the annotation is written from that state, by the Binding itself, see
  :func:`kgpu.kube.objects.device_allocation.render_allocation` and :mod:`kgpu.kube.live.binder`).
  A record that asks less than the pod's request now holds the request (reading more than
  was held is the safe error).
- A pod someone else placed has no record. Whole GPUs it asks for are the ones the
  kubelet's checkpoint names (the Device resource's checkpoint annotation, matched to the
  pod by :mod:`kgpu.kube.snapshot.kubelet_claims`) when that is known, else the lowest
  free minors; a share goes to the lowest GPU with room; MIG instances, RDMA and FPGA
  devices are counted.
- A pod kgpu placed whose checkpoint entry names other GPUs than its record holds the
  kubelet's, where they have room (:mod:`kgpu.kube.snapshot.kubelet_claims`).

Nothing here raises for bad input: a function that cannot account a pod says why (or
returns None), and the caller holds the node instead (``kgpu.state.holding``).
"""

from __future__ import annotations

import numpy as np

from kgpu.kube.objects.device_allocation import DeviceAllocation
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins.node.gpu_fit import gpu_fits
from kgpu.state.cluster import AllocationError, ClusterState


def account_recorded(state: ClusterState, spec: PodSpec, node: int, found: DeviceAllocation) -> str:
    """Allocate what ``found`` records for ``spec`` on ``node``; "" if done, else why not."""
    devices = state.devices[node]
    slot_of = {d.minor: i for i, d in enumerate(devices.gpus)}
    name = state.nodes[node].name
    req = spec.gpu
    if len(found.minors) != req.gpu_slots:
        return f"names {len(found.minors)} GPUs, expected the {req.gpu_slots} the pod requests"
    if any(m not in slot_of for m in found.minors):
        return f"names GPUs {list(found.minors)} of node {name}, expected GPUs that exist there"
    if req.kind is GpuKind.MIG and found.mig and dict(found.mig).get(req.mig_profile) != req.count:
        return f"names MIG instances {dict(found.mig)}, expected {req.count} {req.mig_profile}"
    slots = tuple(slot_of[m] for m in found.minors)
    need = None
    if len(slots) == 1:
        natural = state.gpu_need(spec, node, slots[0])
        if natural is not None:
            mib = found.memory_mib[0] if found.memory_mib else natural[1]
            held = (max(found.milli, natural[0]), max(mib, natural[1]))
            need = None if held == natural else (min(held[0], MILLI_PER_GPU), held[1])
    rdma = _slots(found.rdma, [d.minor for d in devices.rdma], req.rdma)
    fpga = _slots(found.fpga, [d.minor for d in devices.fpga], req.fpga)
    try:
        state.allocate(spec, node, slots, need=need, rdma=rdma, fpga=fpga)
    except AllocationError:
        return (
            f"names GPUs {list(found.minors)} of node {name}, expected GPUs that exist "
            "there and have room"
        )
    return ""


def _slots(minors: tuple[int, ...], pool: list[int], count: int) -> list[int] | None:
    """The slots of recorded device minors; None (choose anew) if the record does not fit."""
    slots = [pool.index(m) for m in minors if m in pool]
    return slots if len(slots) == len(minors) == count else None


def account_unrecorded(
    state: ClusterState, spec: PodSpec, node: int, claimed: tuple[int, ...] | None = None
) -> str | None:
    """Account a bound pod that carries no record; where it went, or None if it cannot.
    ``claimed`` are the GPU slots the kubelet's checkpoint says it holds, if it says."""
    req = spec.gpu
    name = state.nodes[node].name
    slots: tuple[int, ...] | None = ()
    if req.gpu_slots:
        slots = _checkpointed(state, spec, node, claimed)
        if slots is None:
            slots = lowest_free(state, spec, node)
    if slots is None:
        return None
    try:
        state.allocate(spec, node, slots)
    except AllocationError:
        return None
    return f"on GPUs {','.join(map(str, slots))} of {name}" if slots else f"on {name}"


def lowest_free(state: ClusterState, spec: PodSpec, node: int) -> tuple[int, ...] | None:
    """The lowest-numbered GPUs that can take the pod's request now, or None."""
    fits, _ = gpu_fits(state, spec.gpu, np.array([node], dtype=np.int64))
    chosen = tuple(np.flatnonzero(fits[0]).tolist())[: spec.gpu.gpu_slots]
    return chosen if len(chosen) == spec.gpu.gpu_slots else None


def _checkpointed(
    state: ClusterState, spec: PodSpec, node: int, claimed: tuple[int, ...] | None
) -> tuple[int, ...] | None:
    """The GPUs the kubelet's checkpoint says this pod holds, if it can hold them."""
    if claimed is None or claim_problem(state, spec, node, claimed):
        return None
    return claimed


def minors_of(state: ClusterState, node: int, slots: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(state.devices[node].gpus[s].minor for s in slots))


def claim_problem(state: ClusterState, spec: PodSpec, node: int, slots: tuple[int, ...]) -> str:
    """Why the pod cannot be accounted on the GPU ``slots`` the kubelet says it holds; ""
    when it can: it asks whole GPUs, as many, or replicas of one GPU (MPS cards), and kgpu's
    books have room there."""
    req = spec.gpu
    minors = minors_of(state, node, slots)
    if req.kind is GpuKind.MPS:
        if len(slots) != 1:
            return (
                f"it asks {req.replicas} replicas of one GPU, yet the kubelet gave it "
                f"replicas of GPUs {list(minors)}"
            )
    elif req.kind is not GpuKind.GPU or req.milli != MILLI_PER_GPU:
        return f"it asks a share of a GPU, yet the kubelet gave it whole GPUs {list(minors)}"
    if len(slots) != req.count:
        return f"it asks {req.count} GPUs, yet the kubelet gave it GPUs {list(minors)}"
    why = state.fits(spec, node, slots)
    if why:
        return (
            f"GPUs {list(minors)} of {state.nodes[node].name} have no room for it in kgpu's "
            f"books ({why}): another pod holds them there, or they are unhealthy"
        )
    return ""
